"""The host pools SGLang 0.5.23 builds for HiCache, pool by pool: how many pages each holds and why.

Which pools ``--hicache-ratio`` scales, and on what (``srt/mem_cache/`` paths):

- **A single-pool model** (MHA/GQA, MLA): one host KV pool of ``int(device tokens x ratio)`` tokens, or
  ``--hicache-size`` GB over its bytes a token, rounded down to pages plus one padding page
  (``pool_host/base.py:214-229``).
- **DeepSeek V4, CUDA's paged layout** (``hybrid_cache/hybrid_pool_assembler.py:647-676, 993-1208``): the
  Full-anchored pools (``c4``, the C4 indexer and, with the fp4 indexer, its scale pool, ``c128``) hold
  ``int(Full device pages x ratio)`` pages each (:667-676, the indexer regions at :1084-1098 take the same
  ``num_host_pages``); the SWA-anchored pools (``swa`` and the two C4 state rings) hold ``int(SWA device pages
  x ratio)`` (:1029-1045, 1114-1146); the ``kv`` anchor is a logical pool of no bytes (:1014-1016); the C128
  state pool is not registered (:1174-1175). No padding page (``memory_pool_host.py:276-279``), and
  ``--hicache-size`` is refused (:660-664).
- **DeepSeek V4, ROCm's unified KV layout** (:mod:`sim.model.unified_kv`): no SWA or state host pools (the
  SWA ring is rebuilt, :993-997, 1114); the compressed rows (and, with fp8 rows, their rope siblings,
  :667-686) at the Full count.
- **DeepSeek V4.1**: the C1/C2 source KV and indexer pools at the Full count (:865-890, 1222-1226), ``swa``
  at the SWA count; no state rings (V4.1 has no ratio-4 layers).

A model of more than one pool is sized like DeepSeek V4 (paged host pools); one pool, like a single KV pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.pools import ModelSpec

__all__ = ["HostPool", "host_pool_bytes", "host_pools", "v4_host_pages"]


@dataclass(frozen=True)
class HostPool:
    """One host pool per rank: its pages, the bytes of one, and the rule SGLang sizes it by."""

    name: str
    pages: int
    bytes_per_page: float
    rule: str

    @property
    def nbytes(self) -> int:
        return int(self.pages * self.bytes_per_page)


_FULL_RULE = "int(Full device pages x ratio) (hybrid_pool_assembler.py:667-676)"
_SWA_RULE = "int(SWA device pages x ratio) (hybrid_pool_assembler.py:668, 1029-1045, 1114-1146)"
_SINGLE_RULE = "int(device tokens x ratio) // page + 1 padding page (pool_host/base.py:224-229)"


def v4_host_pages(full_device_pages: int, swa_device_pages: int, ratio: float) -> tuple[int, int]:
    """(Full-anchored, SWA-anchored) host pages of DeepSeek V4 at ``--hicache-ratio ratio``
    (``_deepseek_v4_num_host_pages``, ``hybrid_pool_assembler.py:647-676``)."""
    return int(full_device_pages * ratio), int(swa_device_pages * ratio)


def host_pools(model: ModelSpec, l2_pages: int, l2_swa_pages: int, page_tokens: int) -> list[HostPool]:
    """The host pools of one rank holding ``l2_pages`` Full pages (``l2_swa_pages`` SWA pages) of
    ``page_tokens`` tokens: every pool with bytes, at the count SGLang gives it."""
    scale = page_tokens / model.page_size
    if len(model.pools) == 1:
        pool = model.pools[0]
        return [HostPool(pool.name, l2_pages + 1, pool.bytes_per_page * scale, _SINGLE_RULE)]
    out = []
    for pool in model.pools:
        if not pool.bytes_per_page:
            continue  # the logical kv anchor (hybrid_pool_assembler.py:1014-1016)
        swa = pool.anchor != "kv"
        out.append(HostPool(pool.name, l2_swa_pages if swa else l2_pages, pool.bytes_per_page * scale,
                            _SWA_RULE if swa else _FULL_RULE))  # fmt: skip
    return out


def host_pool_bytes(model: ModelSpec, l2_pages: int, l2_swa_pages: int, page_tokens: int) -> int:
    """Pinned host bytes of one rank (:func:`host_pools` summed); 0 without host pages."""
    if not l2_pages:
        return 0
    return sum(p.nbytes for p in host_pools(model, l2_pages, l2_swa_pages, page_tokens))
