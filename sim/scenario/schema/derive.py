"""What a catalog GPU and a model config.json determine, filled into the raw scenario where it leaves them unset:
the GPU's datasheet figures, SGLang's default chunk size and KV budget, and the compute model's inputs.

Runs before the sections validate (:meth:`Scenario._derive <sim.scenario.schema.scenario.Scenario._derive>`), so every
section checks what was derived for it as it checks what was typed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

from sim.base.inputs import MAX_REQUEST_TOKENS, number_problem
from sim.scenario.schema.hardware import HardwareConfig
from sim.scenario.schema.model import ModelConfig, _named_config
from sim.scenario.schema.scheduler import SchedulerConfig
from sim.scenario.schema.section import _derivable, _field_error, _resolve_file


@dataclass
class _Filled:
    """The dotted paths derived so far, in the order they were filled."""

    paths: list[str] = field(default_factory=list)

    def fill(self, section: dict, name: str, key: str, value: Any) -> None:
        if key not in section:
            section[key] = value
            self.paths.append(f"{name}.{key}")


def derive(data: Any, info: ValidationInfo) -> Any:
    """``data`` with what its GPU and model config imply filled in; the filled paths go to ``info.context``.

    Nothing is derived from a mistyped or out-of-bounds input: the sections report it in their own words.
    """
    if not isinstance(data, dict):
        return data
    model, hw = data.get("model"), data.get("hardware")
    if not isinstance(model, dict | str | None) or not isinstance(hw, dict | None):
        return data  # the sections report it
    if not all(_derivable(c, d) for c, d in ((ModelConfig, model), (HardwareConfig, hw),
                                               (SchedulerConfig, data.get("scheduler")))):  # fmt: skip
        return data  # derive only from values of their types, numbers in bounds; the sections report the rest
    model = {"name": model} if isinstance(model, str) else model
    config = model.get("config") if isinstance(model, dict) else None
    if config is None and isinstance(model, dict) and model.get("pools") is None:
        config = _named_config(model.get("name"))
    gpu_name = hw.get("gpu") if isinstance(hw, dict) else None
    if (config is None and gpu_name is None) or not isinstance(config, str | None) or not isinstance(
            gpu_name, str | None) or not isinstance(data.get("scheduler") or {}, dict) or not isinstance(
            data.get("compute") or {}, dict):  # fmt: skip
        return data  # nothing to derive, or a mistyped input the sections report in their words
    hw = dict(hw or {})
    parallel = _parallel(hw)
    if parallel is None:
        return data  # the hardware section names the sizes that do not fit, before anything consumes them
    tp, dp = parallel
    shape = _shape(config, model, tp, dp, info)
    gpu = _gpu(gpu_name)
    data = dict(data)
    filled = _Filled()
    if config is not None and isinstance(model, dict) and "config" not in model:  # a model by its HF id
        model = dict(model)
        filled.fill(model, "model", "config", config)
        data["model"] = model
    if gpu is not None:
        data["scheduler"] = _fill_gpu(hw, dict(data.get("scheduler") or {}), gpu, shape, filled)
    if shape is not None:
        data["compute"] = _fill_compute(dict(data.get("compute") or {}), shape, filled)
        if gpu is not None and "kv_mem_gb" not in hw:
            _fill_kv_mem(hw, data.get("scheduler") or {}, gpu, shape, tp, dp, filled, config)
    data["hardware"] = hw
    _check_bounds(data, filled.paths, config, gpu_name)
    if isinstance(info.context, dict):
        info.context["derived"] = tuple(filled.paths)
    return data


def _parallel(hw: dict) -> tuple[int, int] | None:
    """(TP size, attention-DP size) the model's per-rank sizes follow; None when they do not fit together (the
    hardware section reports it: a derivation from them would blame what it derives, not the sizes)."""
    tp = hw.get("tp_size", 1)
    dp = hw.get("dp_size", 1) if hw.get("enable_dp_attention") is True else 1
    return (tp, dp) if isinstance(tp, int) and isinstance(dp, int) and dp >= 1 and tp % dp == 0 else None


def _shape(config: str | None, model: Any, tp: int, dp: int, info: ValidationInfo) -> Any:
    """The :class:`sim.model.modelcfg.ModelShape` of ``config`` (None without one); a bad config is a
    ``model.config`` error."""
    from sim.base.errors import InputError
    from sim.model import modelcfg

    try:
        if config is not None:
            ref = config
            if not modelcfg.is_named(ref):
                ref = _resolve_file(ref, info)
            cfg, name = modelcfg.load_config(ref)
            return modelcfg.derive(cfg, tp_size=tp, kv_dtype=model.get("kv_dtype", "auto"), name=name,
                                   expert_dtype=model.get("expert_dtype", "auto"),
                                   fp4_indexer=model.get("fp4_indexer") is True, attn_dp_size=dp)  # fmt: skip
    except (InputError, PydanticCustomError) as exc:
        raise _field_error("model.config", str(exc)) from None
    return None


def _gpu(gpu_name: str | None) -> Any:
    """The catalog GPU named (None without one); an unknown name is a ``hardware.gpu`` error."""
    from sim.base.errors import InputError
    from sim.model import hardware

    try:
        return hardware.get_gpu(gpu_name) if gpu_name is not None else None
    except InputError as exc:
        raise _field_error("hardware.gpu", str(exc)) from None


def _fill_gpu(hw: dict, sched: dict, gpu: Any, shape: Any, filled: _Filled) -> dict:
    """The GPU's datasheet figures into ``hw``, SGLang's default chunk size for its memory into ``sched``."""
    from sim.model import hardware

    filled.fill(hw, "hardware", "gpu_name", gpu.name)
    filled.fill(hw, "hardware", "gpu_mem_gb", round(gpu.memory_mib * hardware.MIB / 1e9, 3))
    filled.fill(hw, "hardware", "hbm_bandwidth_tbps", gpu.hbm_tbps)
    filled.fill(hw, "hardware", "peak_tflops", float(gpu.peak_tflops(shape.compute_dtype if shape else "bf16")))
    version = hw.get("sglang_defaults", "0.5.23")
    filled.fill(sched, "scheduler", "chunked_prefill_size",
                hardware.default_chunked_prefill_size(gpu.memory_mib, version))  # fmt: skip
    return sched


def _fill_compute(comp: dict, shape: Any, filled: _Filled) -> dict:
    """The roofline's inputs the model shape gives."""
    for key, value in (("prefill_flops_per_token", shape.flops_per_token),
                       ("attn_flops_per_token_per_ctx", shape.attn_flops_per_pair),
                       ("decode_bytes_per_step", shape.dense_weight_bytes),
                       ("kv_bytes_per_token_read", shape.kv_read_bytes_per_token),
                       ("kv_bytes_per_request", shape.kv_read_bytes_per_request),
                       ("expert_bytes", shape.expert_bytes), ("n_experts", shape.n_experts),
                       ("experts_per_token", shape.experts_per_token)):  # fmt: skip
        filled.fill(comp, "compute", key, float(value) if isinstance(value, float) else value)
    return comp


def _fill_kv_mem(hw: dict, sched: dict, gpu: Any, shape: Any, tp: int, dp: int, filled: _Filled,
                 config: str | None) -> None:  # fmt: skip
    """``hardware.kv_mem_gb`` as SGLang sizes it: the static memory fraction less the weights per rank, with what
    ``hardware.moe_a2a_backend`` keeps resident beside them (:mod:`sim.model.moeweights`). Weights that leave none
    are the config's (at the TP size given), not a ``kv_mem_gb`` nobody typed."""
    from sim.model import hardware
    from sim.model.moeweights import a2a_resident_bytes

    chunk = sched.get("chunked_prefill_size")
    if isinstance(chunk, int) and chunk >= MAX_REQUEST_TOKENS:  # chunking off (a chunk no request reaches):
        # SGLang sizes the activations by max_prefill_tokens instead (arg_groups/memory_hook.py:304-307)
        chunk = sched.get("max_prefill_tokens", SchedulerConfig.model_fields["max_prefill_tokens"].default)
    mfs = hw.get("mem_fraction_static") or hardware.default_mem_fraction_static(
        gpu, tp_size=tp, chunked_prefill_size=chunk,
        max_running_requests=sched.get("max_running_requests"), mla=shape.family in ("mla", "dsa"),
        version=hw.get("sglang_defaults", "0.5.23"), attn_dp_size=dp)  # fmt: skip
    weights = shape.weight_bytes_per_rank + a2a_resident_bytes(
        shape.moe_layout, backend=hw.get("moe_a2a_backend", "none"), gpu=gpu.name, tp_size=tp,
        expert_dtype=shape.expert_dtype)  # fmt: skip
    kv = hardware.kv_budget_bytes(gpu, mfs, weights)
    if kv <= 0:
        raise _field_error("model.config", f"{config}: the weights ({weights / 1e9:,.1f} GB per "
                           f"rank at tp_size {tp}) leave no KV memory at mem_fraction_static {mfs:g} on {gpu.name}; "
                           "a larger tp_size?")  # fmt: skip
    filled.fill(hw, "hardware", "kv_mem_gb", round(kv / 1e9, 3))


def _check_bounds(data: dict, derived: list[str], config: str | None, gpu_name: str | None) -> None:
    """What a config.json implies is bounded too, and blamed on the config (or the GPU)."""
    for path in derived:
        section, key = path.split(".")
        problem = number_problem(data[section][key])
        if problem is not None:
            origin = "model.config" if section == "compute" or config is not None else "hardware.gpu"
            raise _field_error(origin, f"{config or gpu_name} gives {path} = {problem} (check its sizes)")
