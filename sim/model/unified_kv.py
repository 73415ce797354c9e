"""DeepSeek V4 on ROCm's unified KV layout: the pools it registers and their bytes.

On ROCm with ``SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton`` (``layers/attention/dsv4/unified_kv_gate.py:12-15``)
SGLang keeps each layer's KV in one buffer of whole rows (ATOM's layout, ``mem_cache/deepseek_v4_memory_pool.py:836-
921``): the SWA ring first, then the compressed rows. A row is ``qk_nope_head_dim + qk_rope_head_dim`` = 448 + 64
bf16 values (1,024 B, ``deepseek_v4_memory_pool.py:297, 818-834``), or, with ``SGLANG_DSV4_UNIFIED_KV_FP8=1`` on
gfx95 (``unified_kv_gate.py:19-38``), an fp8 ``nope`` row of 512 B (``DSV4_FP8_NOPE_ROW_BYTES``,
``kernels/ops/attention/dsv4/unified_kv_kernels/layout.py:23``) beside a bf16 ``rope`` row of 128 B in a sibling
pool. Compressed rows are unpadded: a page holds ``page_size / ratio`` of them (``deepseek_v4_memory_pool.py:1340-
1381``).

For HiCache (``mem_cache/hybrid_cache/hybrid_pool_assembler.py``): the SWA ring and the compressor state rings
are not host pools (the ring is rebuilt, :993-997, 1114); ``c4`` and ``c128`` hold the compressed rows
(:677-686), ``c4_rope`` and ``c128_rope`` their rope halves under fp8 (``hicache_storage.py:109-110``,
:697-742); the C4 indexer as on CUDA, except that ROCm's fp4 indexer keeps its payload and scales in two buffers
(``deepseek_v4_memory_pool.py:606-623``), so two pools (:744-790). DeepSeek V4.1 refuses the layout at start
(``arg_groups/deepseek_v4_hook.py:340-352``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.base.errors import InputError
from sim.model.pools import HitPolicy, ModelSpec, Pool

__all__ = ["V41_REFUSED", "UnifiedFixed", "row_bytes", "unified_fixed", "unified_model", "unified_pools"]

NOPE_DIM, ROPE_DIM = 448, 64  # qk_nope_head_dim + qk_rope_head_dim == 512 (deepseek_v4_memory_pool.py:297)
FP8_NOPE_ROW_BYTES = 512  # unified_kv_kernels/layout.py:23
_FP8_INDEXER = 132  # fused fp8 key + scale per compressed token (deepseek_v4_memory_pool.py:53-57)
_FP4_PAYLOAD, _FP4_SCALE = 64, 4  # ROCm's fp4 indexer: (4, 16) uint8 payload and 4 scale bytes a slot (:606-623)
V41_REFUSED = ("DeepSeek-V4.1 does not support the unified KV layout yet; disable it to serve this model. "
               "(arg_groups/deepseek_v4_hook.py:340-352)")  # fmt: skip
# Catalog name -> (layers, C4 layers, C128 layers), as the CUDA catalog builds them (sim.model.pools).
_LAYOUTS = {"deepseek-v4-flash": (43, 21, 20), "deepseek-v4-pro": (61, 30, 31)}
WINDOW = 128  # V4's sliding_window (config.json)
_HEAD, _INDEX_HEAD, _STATE_BYTES = 512, 128, 4  # attention / indexer head dims; fp32 compressor states (environ.py:1832)


@dataclass(frozen=True)
class UnifiedFixed:
    """Device bytes a unified-layout V4 server sets aside per request slot before it sizes the Full pool."""

    swa_ring: int  # every layer's window of whole rows, per slot
    c4_state: int  # the C4 compressor's (and its indexer's) state ring, per slot
    c128_state: int  # the C128 compressor's state ring, per slot

    @property
    def total(self) -> int:
        return self.swa_ring + self.c4_state + self.c128_state


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def unified_fixed(name: str, max_running: int, *, fp8: bool = False, draft_tokens: int = 0) -> UnifiedFixed:
    """The fixed bytes SGLang subtracts from a rank's KV memory before it sizes the Full pool under the unified
    layout (``model_executor/pool_configurator.py:1638-1668``), each at ``max_running + 1`` request slots (:1504-1507).

    The SWA ring is ``slots x (window + draft tokens - 1) x row x every layer`` (:1576-1599; ring size
    ``mem_cache/deepseek_v4_memory_pool.py:150-153``, row :818-834): ring mode has no paged SWA pool to size
    (:1328-1335) and no SWA share in the Full token's bytes (:1437-1446). The C4 state is ``slots x ring`` rows,
    padded as CompressStatePool pads them, of ``4 x (512 + 128)`` fp32 values a C4 layer (:1545-1574); the C128
    state ``slots x ring`` rows of ``2 x 512`` a C128 layer (:1509-1531). Rings: 8 / 128 rows, 16 / 256 with
    speculative decoding (``deepseek_v4_memory_pool.py:60-79``; ROCm has no online C128, :50).
    """
    if name not in _LAYOUTS:
        raise InputError(f"unknown model {name!r} for ROCm's unified KV layout (known: {', '.join(_LAYOUTS)})")
    layers, c4, c128 = _LAYOUTS[name]
    slots = max_running + 1
    ring4, ring128 = (16, 256) if draft_tokens > 0 else (8, 128)
    ring = slots * (WINDOW + max(0, draft_tokens - 1)) * sum(row_bytes(fp8)) * layers
    rows4 = _ceil_to(slots * ring4 + ring4 + 1, 4)
    rows128 = _ceil_to(slots * ring128 + ring128 + 1, 128)
    return UnifiedFixed(swa_ring=ring,
                        c4_state=rows4 * 4 * (_HEAD + _INDEX_HEAD) * _STATE_BYTES * c4,
                        c128_state=rows128 * 2 * _HEAD * _STATE_BYTES * c128)  # fmt: skip


def row_bytes(fp8: bool) -> tuple[int, int]:
    """(main row, rope sibling row) bytes of one compressed token: bf16 rows have no sibling."""
    return (FP8_NOPE_ROW_BYTES, ROPE_DIM * 2) if fp8 else ((NOPE_DIM + ROPE_DIM) * 2, 0)


def unified_pools(page: int, c4: int, c128: int, *, fp8: bool = False, fp4_indexer: bool = False) -> tuple[Pool, ...]:
    """The host-registered pools of V4 on the unified layout, all Full-anchored, bytes per ``page``-token page."""
    if page % 128:
        raise InputError(f"page_size {page} is not a multiple of compress_ratio 128")
    main, rope = row_bytes(fp8)
    kv = HitPolicy.ALL_PAGES
    per4, per128 = page // 4, page // 128
    pools = [Pool("kv", 0, "kv", kv), Pool("c4", c4 * per4 * main, "kv", kv)]
    if rope:
        pools.append(Pool("c4_rope", c4 * per4 * rope, "kv", kv))
    if fp4_indexer:
        pools += [Pool("c4_indexer", c4 * per4 * _FP4_PAYLOAD, "kv", kv),
                  Pool("c4_indexer_scale", c4 * per4 * _FP4_SCALE, "kv", kv)]  # fmt: skip
    else:
        pools.append(Pool("c4_indexer", c4 * per4 * _FP8_INDEXER, "kv", kv))
    pools.append(Pool("c128", c128 * per128 * main, "kv", kv))
    if rope:
        pools.append(Pool("c128_rope", c128 * per128 * rope, "kv", kv))
    return tuple(pools)


def unified_model(name: str, page: int = 256, *, fp8: bool = False, fp4_indexer: bool = False) -> ModelSpec:
    """A catalog V4 model on ROCm's unified layout; V4.1 is refused as SGLang refuses it."""
    if name.startswith("deepseek-v4.1"):
        raise InputError(f"{name} on ROCm's unified KV layout: {V41_REFUSED}")
    if name not in _LAYOUTS:
        raise InputError(f"unknown model {name!r} for ROCm's unified KV layout (known: {', '.join(_LAYOUTS)})")
    layers, c4, c128 = _LAYOUTS[name]
    rows = "fp8 nope + bf16 rope rows" if fp8 else "bf16 rows of 1,024 B"
    # No sliding window here: the ring is per request on the GPU, outside the tree and the host tier.
    return ModelSpec(name, page, unified_pools(page, c4, c128, fp8=fp8, fp4_indexer=fp4_indexer), 0,
                     512 if layers <= 43 else 1024, layers,
                     notes=f"ROCm unified KV layout ({rows}): {layers} layers, {c4} C4, {c128} C128; the 128-token SWA "
                     "ring and compressor states stay on the GPU (no host pools)" + ("; fp4 indexer" if fp4_indexer else ""))  # fmt: skip
