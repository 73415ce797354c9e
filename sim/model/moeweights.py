"""Weight bytes an MoE all-to-all backend keeps on each rank beyond the checkpoint's TP-sharded layout.

SGLang 0.5.23 sizes the KV pool from the GPU memory free once the model is loaded and post-processed, less
``(1 - mem_fraction_static)`` of the memory free before loading (``mem_cache/kv_cache_configurator.py:2990-3060``).
Whatever ``--moe-a2a-backend`` adds during loading is therefore charged to the KV pool, while what it allocates on
the first forward is not:

- **shared experts replicated**: with an all-to-all backend DeepSeek's ``DeepseekV2MoE`` builds its shared experts
  ``parallel_group="replicated"``, whole on every rank, instead of sharded over the TP group
  (``models/deepseek_v2.py:874-896``; DeepSeek V2/V3/V4, whose MoE class it is);
- **MegaMoE's scale copies**: with ``--moe-a2a-backend megamoe`` FP4 experts are rebuilt at
  ``process_weights_after_loading`` (``layers/quantization/fp8.py:2230-2236``), which keeps a second, UTCCP-transposed
  copy of both expert scale tensors, packed UE8M0 at one byte per 32 weights (``layers/moe/mega_moe.py:681-700``);
- **MegaMoE's shared-expert L1**: DeepSeek V4 on SM100 with FP4 experts (the fp8xfp4 kernel) and FP8 shared experts
  whose block divides by 32 fuses the shared expert into the MegaMoE kernel after loading
  (``models/deepseek_v4.py:5089-5110``, ``layers/moe/mega_moe.py:196-207``, run from ``load_model``,
  ``model_runner.py:1332``, before the pools, ``managers/scheduler.py:1128-1137``), copying its gate/up weights interleaved:
  ``2 x moe_intermediate x hidden`` FP8 bytes a layer beside the original (``mega_moe.py:706-717``; their block scales
  are under 0.1% of that and left out).

Not charged: MegaMoE's symmetric all-to-all buffer (``mega_moe.py:119-160``) is built on the first forward through
a MoE layer, i.e. in CUDA-graph capture after the KV pool exists (``managers/scheduler.py:1128-1146``), so it comes
out of the ``1 - mem_fraction_static`` slack; so do DeepEP's buffers (``model_runner.py:1220``, after capture).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["A2A_REPLICATED_SHARED", "MEGAMOE_SM100_GPUS", "MoeLayout", "a2a_resident_bytes"]

# --moe-a2a-backend values that build DeepSeek's shared experts whole on every rank (deepseek_v2.py:874-887).
A2A_REPLICATED_SHARED = ("deepep", "pplx", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe",
                         "flashinfer_megamoe", "deepep_v2")  # fmt: skip
# Catalog GPUs of compute capability 10.x, where is_sm100_supported() holds (mega_moe.py:202).
MEGAMOE_SM100_GPUS = ("B200", "B300", "GB200", "GB300")


@dataclass(frozen=True)
class MoeLayout:
    """What of a config the rules above read."""

    moe_layers: int
    hidden: int
    moe_intermediate: int
    n_routed: int
    n_shared: int
    deepseek_moe: bool  # built from DeepseekV2MoE (DeepSeek V2/V3/V4 and their kin)
    deepseek_v4: bool
    shared_fp8_block32: bool  # shared experts FP8 with a block whose K divides by 32 (mega_moe.py:204-206)
    dense_weight_bytes: float  # bytes per element of the shared experts (the checkpoint's dense weights)


def a2a_resident_bytes(layout: MoeLayout | None, *, backend: str, gpu: str | None, tp_size: int,
                       expert_dtype: str) -> float:  # fmt: skip
    """Bytes per rank ``backend`` adds to the weights before the KV pool is sized (0 for none, or no MoE)."""
    if layout is None or backend == "none" or not layout.deepseek_moe:
        return 0.0
    expert = 3 * layout.hidden * layout.moe_intermediate  # gate, up, down
    out = 0.0
    if backend in A2A_REPLICATED_SHARED:
        out += layout.moe_layers * layout.n_shared * expert * layout.dense_weight_bytes * (1 - 1 / tp_size)
    if backend == "megamoe" and expert_dtype == "fp4":
        out += layout.moe_layers * layout.n_routed / tp_size * expert / 32
        sm100 = (gpu or "").upper() in MEGAMOE_SM100_GPUS
        if sm100 and layout.deepseek_v4 and layout.shared_fp8_block32:
            out += layout.moe_layers * layout.n_shared * 2 * layout.hidden * layout.moe_intermediate
    return out
