"""One model, one precision: the routed experts' dtype ``auto`` resolves to is the one memory sizing and the
measured-kernel backend both use, and ``validate`` says what it chose."""

from __future__ import annotations

import pytest

from sim.base.errors import InputError
from sim.model.modelcfg import derive, expert_dtype_of, load_config
from sim.scenario.load import scenario_from_dict
from sim.scenario.validate import validate_file

pytest.importorskip("aiconfigurator_core")

V4_PRO = "deepseek-ai/DeepSeek-V4-Pro"


def test_deepseek_v4s_config_declares_fp4_experts_and_memory_sizes_them_so():
    cfg, _ = load_config(V4_PRO)
    assert expert_dtype_of(cfg) == "fp4"  # its config.json's expert_dtype (no routed_experts_quant_method)
    auto, fp4, fp8 = (derive(cfg, tp_size=8, expert_dtype=d) for d in ("auto", "fp4", "fp8"))
    assert auto.expert_dtype == "fp4" and auto.weight_bytes_per_rank == fp4.weight_bytes_per_rank
    assert fp8.weight_bytes_per_rank > 1.5 * auto.weight_bytes_per_rank


def test_the_kernel_backend_prices_the_same_experts():
    from sim.model.aic import _setup

    sc = scenario_from_dict({"name": "p", "model": V4_PRO, "hardware": {"gpu": "B300", "tp_size": 8},
                             "hicache": {"enabled": False}})  # fmt: skip
    assert sc.model.shape(8).expert_dtype == "fp4"
    assert "mxfp4" in _setup(sc, "b300_sxm").moe_quant  # MXFP4 kernels, as memory counts MXFP4 bytes


def test_validate_says_what_auto_chose(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nmodel: {V4_PRO}\nhardware:\n  gpu: B300\n  tp_size: 8\nhicache:\n  enabled: false\n")
    text = validate_file(path)
    assert "experts fp4 (auto: the checkpoint's)" in text
    # the default backend, auto: V4-Pro on B300 is in the kernel database, and validate says whose kernels
    assert "step time aiconfigurator (measured SGLang kernels), B300 on b300_sxm kernels <- auto: " in text


def test_the_kernel_backend_prices_the_experts_at_the_resolved_dtype_not_the_model_name_s():
    # The bundled V4-Flash config is the FP8 checkpoint's: memory sizes fp8 experts, and so do the kernels,
    # where the name alone would take the MXFP4 checkpoint's (which H200's tables have no MoE rows for).
    from sim.model.pricing import step_model
    from sim.scenario.resolve import resolve

    sc = scenario_from_dict({"name": "f", "model": {"name": "DeepSeek-V4-Flash", "config": "deepseek-v4-flash"},
                             "hardware": {"gpu": "H200", "tp_size": 8}, "hicache": {"enabled": False},
                             "compute": {"backend": "aiconfigurator"}})  # fmt: skip
    experts = resolve(sc).precisions["experts"]
    assert experts == "fp8"
    assert step_model(sc, expert_dtype=experts).setup.moe_quant == "fp8_block"
    with pytest.raises(InputError, match="w4a16_mxfp4_cutlass"):
        step_model(sc)  # the scenario's own auto: the estimator's rule for the name


def test_a_decode_instance_is_priced_at_the_experts_its_memory_holds_too(monkeypatch):
    # A decode instance resolves no serving pools, yet its kernels must price the experts its memory holds.
    import sim.hisparse.decode as decode
    from sim.app.run import run_scenario
    from sim.scenario.precision import expert_dtype

    sc = scenario_from_dict({"name": "d", "model": {"name": "DeepSeek-V4-Flash", "config": "deepseek-v4-flash"},
                             "hardware": {"gpu": "H200", "tp_size": 8}, "cluster": {"role": "decode"},
                             "hicache": {"swa_full_tokens_ratio": 0.1}, "compute": {"backend": "aiconfigurator"},
                             "workload": {"kind": "synthetic", "num_requests": 4, "input_length": 2048,
                                          "output_length": 8}})  # fmt: skip
    assert expert_dtype(sc) == "fp8"
    asked = []
    real = decode.step_model

    def spy(scenario, fitted=None, dtype=None):
        asked.append(dtype)
        return real(scenario, fitted, dtype)

    monkeypatch.setattr(decode, "step_model", spy)
    run_scenario(sc)
    assert asked == ["fp8"]
