"""The model catalog: which pools hold a token's state, and how many bytes each takes per page.

Bytes are derived from layer structure (layers, compress ratio, bytes per slot, padding, state ring rows),
never typed in as totals, so that a new model is a YAML description away. Figures and formulas follow
SGLang 0.5.23 ``pool_configurator.py:1372-1404`` and ``deepseek_v4_memory_pool.py:53-115``; see
``shared/reference/sglang_hicache.md``. This module is data: it holds no residency logic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from sim.base.errors import InputError
from sim.base.text import plural

__all__ = [
    "CATALOG",
    "HitPolicy",
    "LayerGroup",
    "ModelSpec",
    "Pool",
    "get_model",
    "model_from_dict",
    "pool_table",
    "v4_pools",
]


class HitPolicy(str, Enum):
    """How a storage hit is judged for a pool (SGLang ``hicache_storage.py:124-137``)."""

    ALL_PAGES = "ALL_PAGES"  # every page of the prefix must be present
    TRAILING_PAGES = "TRAILING_PAGES"  # only the trailing window must be present


@dataclass(frozen=True)
class LayerGroup:
    """Layers that contribute identical pages to one pool.

    A KV-like group stores ``page_size / compress_ratio`` slots of ``bytes_per_slot`` per layer, padded up to
    a multiple of ``align``. A state group stores ``ring_rows`` rows of ``row_bytes`` per layer per page,
    whatever the page size (the compressor's rolling state).
    """

    layers: int
    compress_ratio: int = 1
    bytes_per_slot: int = 0
    align: int = 1
    ring_rows: int = 0
    row_bytes: int = 0

    def page_bytes(self, page_size: int) -> int:
        if self.layers < 0:
            raise InputError("layers: must be >= 0")
        if self.ring_rows:
            return self.layers * self.ring_rows * self.row_bytes
        if page_size % self.compress_ratio:
            raise InputError(f"page_size {page_size} is not a multiple of compress_ratio {self.compress_ratio}")
        slots = page_size // self.compress_ratio
        per_layer = math.ceil(slots * self.bytes_per_slot / self.align) * self.align
        return self.layers * per_layer


@dataclass(frozen=True)
class Pool:
    """One registered host/device pool.

    The anchor pool of a group (``name == anchor``) owns the slot indices; sidecars reuse them. The ``kv``
    anchor holds no bytes in SGLang (a ``LogicalHostPool``): its bytes_per_page is 0 for V4.
    """

    name: str
    bytes_per_page: int
    anchor: str  # "kv" or "swa": whose indices this pool reuses
    hit_policy: HitPolicy
    backupable: bool = True
    rank_replicated: bool = True

    @property
    def is_anchor(self) -> bool:
        return self.name == self.anchor


@dataclass(frozen=True)
class ModelSpec:
    """A model as HiCache sees it: a page size, the registered pools, and the sliding window (0: none)."""

    name: str
    page_size: int
    pools: tuple[Pool, ...]
    sliding_window: int = 0
    index_topk: int = 0
    layers: int = 1  # transformer layers: load-back overlaps compute layer by layer
    notes: str = ""
    _by_name: dict[str, Pool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {p.name: p for p in self.pools}
        if len(by_name) != len(self.pools):
            raise InputError(f"model {self.name!r}: duplicate pool names")
        for pool in self.pools:
            if pool.anchor not in by_name:
                raise InputError(f"model {self.name!r}: pool {pool.name!r} names unknown anchor {pool.anchor!r}")
            if pool.bytes_per_page < 0:
                raise InputError(f"model {self.name!r}: pool {pool.name!r}: bytes_per_page must be >= 0")
        if "kv" not in by_name:
            raise InputError(f"model {self.name!r}: needs a 'kv' anchor pool")
        if self.page_size <= 0:
            raise InputError(f"model {self.name!r}: page_size must be > 0")
        object.__setattr__(self, "_by_name", by_name)

    def pool(self, name: str) -> Pool:
        return self._by_name[name]

    @property
    def has_swa(self) -> bool:
        return "swa" in self._by_name

    @property
    def bytes_per_page(self) -> int:
        """Bytes of one page across every pool, as the measured ``page_bytes`` counts them."""
        return sum(p.bytes_per_page for p in self.pools)

    @property
    def paged_host(self) -> bool:
        """Whether SGLang builds paged host pools for it, one per pool (DeepSeek V4, either layout: no padding
        page, ``--hicache-size`` refused, no auto-sizing) rather than one host KV pool."""
        return len(self.pools) > 1

    def group_bytes_per_page(self, anchor: str) -> int:
        return sum(p.bytes_per_page for p in self.pools if p.anchor == anchor)

    def device_pages_for_bytes(self, kv_bytes: float, swa_full_tokens_ratio: float = 0.1) -> int:
        """Full (``kv``-anchor) pages that ``kv_bytes`` of HBM holds, the SWA pool sized at a ratio of it.

        SGLang sizes the SWA device pool as a fraction of the full tokens (``swa_full_tokens_ratio``,
        ``pool_configurator.py:1046``), so each full page costs its kv-group bytes plus that share of the
        swa-group bytes.
        """
        per_page = self.group_bytes_per_page("kv")
        if self.has_swa:
            per_page += swa_full_tokens_ratio * self.group_bytes_per_page("swa")
        if per_page <= 0:
            raise InputError(f"model {self.name!r} has no bytes per page; give bytes_per_token")
        return int(kv_bytes // per_page)


# Layouts (SGLang ``kv_layout.py:18-105``): bytes per slot and the padding unit of a layer's page.
_V4 = {"bytes_per_slot": 584, "align": 576}
_V41 = {"bytes_per_slot": 528, "align": 512}
_V41_FP4 = {"bytes_per_slot": 288, "align": 256}
_FP8_INDEXER = 132  # 128 B payload + 4 B scale per compressed token (index_head_dim 128)
_FP4_INDEXER, _FP4_INDEXER_SCALE = 64, 4  # 128 / 2 B payload + 128 / 32 B scales (--enable-deepseek-v4-fp4-indexer)
_STATE_ROW_C4 = 2 * 2 * 512 * 4  # fp32 compressor state row, head_dim 512
_STATE_ROW_C4_INDEXER = 2 * 2 * 128 * 4
_C4_RING_ROWS = 8  # no speculative decoding (deepseek_v4_memory_pool.py:60-79)


def v4_pools(page: int, layers: int, c4: int, c128: int, fp4_indexer: bool = False) -> tuple[Pool, ...]:
    """DeepSeek V4's seven pools from its layer structure (every layer keeps an SWA window; C4 and C128
    layers add compressed KV, C4 layers an indexer and compressor state)."""
    kv, trailing = HitPolicy.ALL_PAGES, HitPolicy.TRAILING_PAGES
    indexer = _FP4_INDEXER + _FP4_INDEXER_SCALE if fp4_indexer else _FP8_INDEXER
    groups = [
        ("kv", "kv", kv, LayerGroup(0)),
        ("swa", "swa", trailing, LayerGroup(layers, **_V4)),
        ("c4", "kv", kv, LayerGroup(c4, compress_ratio=4, **_V4)),
        ("c4_indexer", "kv", kv, LayerGroup(c4, compress_ratio=4, bytes_per_slot=indexer)),
        ("c128", "kv", kv, LayerGroup(c128, compress_ratio=128, **_V4)),
        ("c4_state", "swa", trailing, LayerGroup(c4, ring_rows=_C4_RING_ROWS, row_bytes=_STATE_ROW_C4)),
        (
            "c4_indexer_state",
            "swa",
            trailing,
            LayerGroup(c4, ring_rows=_C4_RING_ROWS, row_bytes=_STATE_ROW_C4_INDEXER),
        ),
    ]
    return tuple(Pool(n, g.page_bytes(page), a, h) for n, a, h, g in groups)


def _v41_pools(page: int, layers: int, c2_sources: int, c1_sources: int) -> tuple[Pool, ...]:
    kv, trailing = HitPolicy.ALL_PAGES, HitPolicy.TRAILING_PAGES

    def idx(n: int, ratio: int, b: int) -> LayerGroup:
        return LayerGroup(n, compress_ratio=ratio, bytes_per_slot=b)

    groups = [
        ("kv", "kv", kv, LayerGroup(0)),
        ("swa", "swa", trailing, LayerGroup(layers, **_V41)),
        ("c1", "kv", kv, LayerGroup(c1_sources, compress_ratio=1, **_V41_FP4)),
        ("c1_indexer", "kv", kv, idx(c1_sources, 1, _FP4_INDEXER)),
        ("c1_indexer_scale", "kv", kv, idx(c1_sources, 1, _FP4_INDEXER_SCALE)),
        ("c2", "kv", kv, LayerGroup(c2_sources, compress_ratio=2, **_V41_FP4)),
        ("c2_indexer", "kv", kv, idx(c2_sources, 2, _FP4_INDEXER)),
        ("c2_indexer_scale", "kv", kv, idx(c2_sources, 2, _FP4_INDEXER_SCALE)),
    ]
    return tuple(Pool(n, g.page_bytes(page), a, h) for n, a, h, g in groups)


def generic_model(bytes_per_token: int, page_size: int = 1, name: str = "generic") -> ModelSpec:
    """A pre-V4 single-pool model (MLA or MHA): one ``kv`` pool, no window."""
    if bytes_per_token <= 0:
        raise InputError("bytes_per_token: must be > 0")
    pool = Pool("kv", bytes_per_token * page_size, "kv", HitPolicy.ALL_PAGES)
    return ModelSpec(name, page_size, (pool,), layers=61, notes=f"single pool, {bytes_per_token} B/token")


# DeepSeek V3-class MLA in fp8: 61 layers x 576 B (512 latent + 64 rope) per token.
MLA_FP8_BYTES_PER_TOKEN = 61 * 576


def _deepseek_v4_flash(page: int, fp4_indexer: bool = False) -> ModelSpec:
    return ModelSpec(
        "deepseek-v4-flash", page, v4_pools(page, layers=43, c4=21, c128=20, fp4_indexer=fp4_indexer), 128, 512, 43,
        notes="43 layers: 21 C4, 20 C128, 2 SWA-only; 9,158,208 B per 256-token page (measured, EIC)"
        + ("; fp4 C4 indexer" if fp4_indexer else ""),
    )  # fmt: skip


def _deepseek_v4_pro(page: int, fp4_indexer: bool = False) -> ModelSpec:
    return ModelSpec(
        "deepseek-v4-pro", page, v4_pools(page, layers=61, c4=30, c128=31, fp4_indexer=fp4_indexer), 128, 1024, 61,
        notes="estimate from formulas: 61 layers, 30 C4, 31 C128" + ("; fp4 C4 indexer" if fp4_indexer else ""),
    )  # fmt: skip


def _deepseek_v41_flash(page: int, fp4_indexer: bool = False) -> ModelSpec:  # its indexers are fp4 already
    return ModelSpec(
        "deepseek-v4.1-flash", page, _v41_pools(page, layers=40, c2_sources=3, c1_sources=1), 128, 512, 40,
        notes="estimate: 40 layers, KV owned by 3 C2 + 1 C1 source layers, fp4 indexers; no state rings",
    )  # fmt: skip


CATALOG = {
    "deepseek-v4-flash": _deepseek_v4_flash,
    "deepseek-v4-pro": _deepseek_v4_pro,
    "deepseek-v4.1-flash": _deepseek_v41_flash,
}
_V4_PAGE = 256  # asserted by SGLang for DSV4 (kv_cache_configurator.py:2068-2070)


def get_model(name: str, *, page_size: int | None = None, bytes_per_token: int | None = None,
              fp4_indexer: bool = False) -> ModelSpec:  # fmt: skip
    """Look a model up by catalog name; ``generic`` needs ``bytes_per_token`` (default: MLA fp8). ``fp4_indexer``:
    V4's C4 indexer keys as SGLang's fp4 indexer stores them (``deepseek_v4_memory_pool.py:53-57, 577``)."""
    if name == "generic":
        return generic_model(bytes_per_token or MLA_FP8_BYTES_PER_TOKEN, page_size or 1)
    if name not in CATALOG:
        known = ", ".join([*CATALOG, "generic"])
        raise InputError(f"unknown model {name!r} (known: {known})")
    return CATALOG[name](page_size or _V4_PAGE, fp4_indexer)


def model_from_dict(d: dict[str, Any], source: str | None = None) -> ModelSpec:
    """Build a model from a YAML-style description.

    ``{"name", "page_size", "sliding_window", "index_topk", "pools": [{"name", "anchor", "hit_policy",
    "backupable", "rank_replicated", and either "bytes_per_page" or a "layers" group description}]}``.
    """
    try:
        page = int(d["page_size"])
        pools = []
        for i, p in enumerate(d["pools"]):
            where = f"pools[{i}]"
            if "bytes_per_page" in p:
                nbytes = int(p["bytes_per_page"])
            else:
                group_keys = ("layers", "compress_ratio", "bytes_per_slot", "align", "ring_rows", "row_bytes")
                nbytes = LayerGroup(**{k: int(p[k]) for k in group_keys if k in p}).page_bytes(page)
            if nbytes < 0:
                raise InputError(f"{where}.bytes_per_page: must be >= 0", source=source)
            anchor = p.get("anchor", "kv")
            policy = HitPolicy(p.get("hit_policy", "TRAILING_PAGES" if anchor == "swa" else "ALL_PAGES"))
            pools.append(
                Pool(p["name"], nbytes, anchor, policy, bool(p.get("backupable", True)),
                     bool(p.get("rank_replicated", True)))
            )  # fmt: skip
        return ModelSpec(
            str(d.get("name", "custom")), page, tuple(pools),
            int(d.get("sliding_window", 0)), int(d.get("index_topk", 0)), int(d.get("layers", 1)),
        )  # fmt: skip
    except KeyError as exc:
        raise InputError(f"model: missing field {exc.args[0]!r}", source=source) from None
    except InputError as exc:
        if source and not str(exc).startswith(source):
            raise InputError(str(exc), source=source) from None
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"model: {exc}", source=source) from None


def pool_table(model: ModelSpec) -> str:
    """The per-pool table that ``hicache-sim pools MODEL`` prints."""
    rows = [("pool", "anchor", "hit policy", "bytes/page", "B/token", "backup", "replicated")]
    for p in model.pools:
        rows.append(
            (p.name + (" (anchor)" if p.is_anchor else ""), p.anchor, p.hit_policy.value,
             f"{p.bytes_per_page:,}", f"{p.bytes_per_page / model.page_size:,.2f}",
             "yes" if p.backupable else "no", "yes" if p.rank_replicated else "no")
        )  # fmt: skip
    total = model.bytes_per_page
    rows.append(("total", "", "", f"{total:,}", f"{total / model.page_size:,.2f}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    head = f"{model.name}: {plural(len(model.pools), 'pool')}, page_size {model.page_size}"
    if model.sliding_window:
        head += f", sliding window {model.sliding_window}"
    kv_tok = model.group_bytes_per_page("kv") / model.page_size
    return "\n".join([head, *lines, f"kv-anchored (global KV) bytes per token: {kv_tok:,.2f}"]) + (
        f"\n{model.notes}" if model.notes else ""
    )
