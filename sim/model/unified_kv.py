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

from sim.base.errors import InputError
from sim.model.pools import HitPolicy, ModelSpec, Pool

__all__ = ["V41_REFUSED", "row_bytes", "unified_model", "unified_pools"]

NOPE_DIM, ROPE_DIM = 448, 64  # qk_nope_head_dim + qk_rope_head_dim == 512 (deepseek_v4_memory_pool.py:297)
FP8_NOPE_ROW_BYTES = 512  # unified_kv_kernels/layout.py:23
_FP8_INDEXER = 132  # fused fp8 key + scale per compressed token (deepseek_v4_memory_pool.py:53-57)
_FP4_PAYLOAD, _FP4_SCALE = 64, 4  # ROCm's fp4 indexer: (4, 16) uint8 payload and 4 scale bytes a slot (:606-623)
V41_REFUSED = ("DeepSeek-V4.1 does not support the unified KV layout yet; disable it to serve this model. "
               "(arg_groups/deepseek_v4_hook.py:340-352)")  # fmt: skip
# Catalog name -> (layers, C4 layers, C128 layers), as the CUDA catalog builds them (sim.model.pools).
_LAYOUTS = {"deepseek-v4-flash": (43, 21, 20), "deepseek-v4-pro": (61, 30, 31)}


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
