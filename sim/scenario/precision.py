"""The server's precisions and step-time backend as a scenario sets them, each with the field or rule it came from.

SGLang settles its dtypes at start: the checkpoint's quantization (``configs/model_config.py:722-733``), the
``--kv-cache-dtype`` flag (``auto``: the model's dtype), DeepSeek V4's fixed KV layouts
(``kernels/ops/attention/dsv4/kv_layout.py:18-30``) and ``--enable-deepseek-v4-fp4-indexer``. The values here are
the ones memory sizing (:func:`sim.model.modelcfg.derive`, :func:`sim.model.pools.get_model`) and the step-time
backends (:mod:`sim.model.compute`, :mod:`sim.model.aic`) read, reported so a user sees what ``auto`` chose.
"""

from __future__ import annotations

from sim.model.pools import CATALOG
from sim.scenario.schema import Scenario

__all__ = ["expert_dtype", "precisions", "step_backend"]

# Catalog V4 models' KV as their layouts store it (kv_layout.py:18-30, sim.model.pools): (KV, indexer keys).
_V4_KV = {"deepseek-v4-flash": "fp8 nope + bf16 rope", "deepseek-v4-pro": "fp8 nope + bf16 rope",
          "deepseek-v4.1-flash": "fp8 window, fp4 compressed"}  # fmt: skip
_UNIFIED_KV = {"unified": "bf16 (ROCm unified layout)", "unified_fp8": "fp8 nope + bf16 rope (ROCm unified_fp8 layout)"}


def expert_dtype(sc: Scenario) -> str | None:
    """The routed experts' dtype the step-time backend prices, as memory is sized at it (None: not determined);
    a decode instance's too, which resolves no serving pools."""
    return precisions(sc).get("experts", (None, ""))[0]


def precisions(sc: Scenario) -> dict[str, tuple[str, str]]:
    """{what: (dtype, where it came from)} for the routed experts, the attention (dense) weights, the KV cache and
    DeepSeek V4's indexer keys; a precision the scenario does not determine (inline pools, a catalog model
    without a config for its weights) is left out rather than guessed."""
    m, hw = sc.model, sc.hardware
    shape = m.shape(hw.tp_size, hw.attn_dp_size)
    catalog = shape.catalog if shape is not None else (m.name if m.pools is None and m.name in CATALOG else None)
    out: dict[str, tuple[str, str]] = {}
    if shape is not None and shape.expert_dtype:
        out["experts"] = (shape.expert_dtype, "model.expert_dtype" if m.expert_dtype != "auto"
                          else "auto: model.config's checkpoint (quantization_config)")  # fmt: skip
    if shape is not None:
        out["attention"] = (shape.compute_dtype, "model.config (quantization_config.quant_method)")
    if catalog is not None:
        if m.kv_layout != "paged":
            out["kv"] = (_UNIFIED_KV[m.kv_layout], "model.kv_layout")
        else:
            out["kv"] = (_V4_KV[catalog], f"the {catalog} KV layout (kv_layout.py)")
        if catalog.startswith("deepseek-v4."):
            out["indexer"] = ("fp4", f"the {catalog} KV layout (kv_layout.py)")
        else:
            out["indexer"] = _indexer(sc)
    elif shape is not None:
        out["kv"] = ((m.kv_dtype, "model.kv_dtype") if m.kv_dtype != "auto"
                     else (_config_dtype(m.config), "auto: model.config's torch_dtype"))  # fmt: skip
    return out


def _indexer(sc: Scenario) -> tuple[str, str]:
    """V4's C4 indexer keys, and the dtype the pools were sized at where that differs (NVIDIA sizes fp4 as fp8)."""
    if not sc.model.fp4_indexer:
        return "fp8", "model.fp4_indexer (false)"
    sized = "" if sc.fp4_indexer_sized else ", pools sized as fp8 (pool_configurator.py:1109-1114)"
    return "fp4", "model.fp4_indexer" + sized


def _config_dtype(config: str | None) -> str:
    from sim.model.modelcfg import load_config

    return str(load_config(config)[0].get("torch_dtype", "bfloat16")) if config is not None else "bfloat16"


def step_backend(sc: Scenario) -> tuple[str, str]:
    """(the step-time backend and the GPU whose figures or kernels price the passes, what chose it): the backend
    the run builds (:func:`sim.model.pricing.step_model`, an estimator compiled once per process), so a transfer
    (:mod:`sim.model.transfer`) or auto's fallback to the roofline reads here as the run will print it."""
    from sim.model.costs import resolve_cost_table
    from sim.model.pricing import step_model

    hw = sc.hardware
    fitted = resolve_cost_table(hw.cost_table).compute_params
    pricer = step_model(sc, fitted, expert_dtype(sc))
    why = pricer.why if pricer.why != "compute.backend" else "compute.backend, hardware.gpu"
    gpu = (hw.gpu or hw.gpu_name).upper()
    if pricer.name == "roofline":
        effs = "fitted efficiencies" if fitted else "spec-estimated efficiencies"
        return f"roofline, {gpu} at {hw.peak_tflops:g} TFLOP/s and {hw.hbm_bandwidth_tbps:g} TB/s, {effs}", why
    d = pricer.describe()
    priced = d.get("priced_as") or f"{d['gpu']} on {d['system']} kernels"
    return f"aiconfigurator (measured SGLang kernels), {priced}", why
