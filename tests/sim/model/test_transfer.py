"""GPUs the kernel database lacks: the nearest measured GPU's op times, each scaled by the two datasheets, and
``compute.backend: auto``'s choice between the kernels and the roofline."""

from __future__ import annotations

import pytest

from sim.model.hardware import get_gpu
from sim.model.transfer import Transfer, references
from sim.scenario.load import scenario_from_dict

QWEN = {"name": "t", "model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "MI300X", "tp_size": 2},
        "hicache": {"enabled": False}}  # fmt: skip


class TestTheNearestMeasuredGpu:
    @pytest.mark.parametrize(("gpu", "first"), [("MI355X", "B300"), ("MI300X", "H200"), ("MI325X", "H200"),
                                                ("H20", "H100"), ("H800", "H100"), ("A10", "H100")])  # fmt: skip
    def test_has_the_same_fp4_support_and_the_least_datasheet_distance(self, gpu, first):
        got = references(gpu)
        assert got[0] == first
        assert all(("fp4" in get_gpu(g).tflops) == ("fp4" in get_gpu(gpu).tflops) for g in got)

    def test_a_measured_gpu_is_its_own_first_and_a_baseboard_gpu_never_takes_a_grace_tray(self):
        assert references("GB300")[0] == "GB300" and references("RTX PRO 6000")[0] == "RTX PRO 6000"
        assert not {"GB200", "GB300"} & set(references("MI355X") + references("B300"))


class TestTheRatios:
    def test_each_op_moves_with_what_bounds_it(self):
        t = Transfer.between("MI355X", "B300", "fp8", "w4a8_mxfp4_mxfp8_trtllm")
        mi, b = get_gpu("MI355X"), get_gpu("B300")
        assert t.ratio("context_moe") == pytest.approx(b.tflops["fp4"] / mi.tflops["fp4"])
        assert t.ratio("context_qkv_gemm") == pytest.approx(b.tflops["fp8"] / mi.tflops["fp8"])
        assert t.ratio("context_attention") == pytest.approx(b.tflops["bf16"] / mi.tflops["bf16"])
        assert t.ratio("context_attn_norm") == t.ratio("generation_moe") == pytest.approx(b.hbm_tbps / mi.hbm_tbps)
        assert t.ratio("context_moe_pre_dispatch") == t.ratio("generation_ar_1") == pytest.approx(
            b.link_gbps / mi.link_gbps)  # fmt: skip

    def test_the_label_names_both_gpus_and_the_way_to_a_measured_fit(self):
        label = Transfer.between("H20", "H100", "bf16", None).label()
        assert label.startswith("H20: H100 kernel efficiencies, scaled by datasheet FLOPs")
        assert "calibrate compute --from" in label


pytest.importorskip("aiconfigurator_core")


class TestAPassOnATransferredGpu:
    """Qwen3-30B-A3B on MI300X: H200's kernels, op by op."""

    @pytest.fixture(scope="class")
    def pair(self):
        from sim.model.pricing import step_model

        h200 = {**QWEN, "hardware": {"gpu": "H200", "tp_size": 2}}
        return step_model(scenario_from_dict(QWEN)), step_model(scenario_from_dict(h200))

    def test_a_prefill_is_the_reference_ops_each_times_its_ratio(self, pair):
        mi, h = pair
        assert mi.transfer.reference == "H200" and h.transfer is None
        ctx, _ = h.handle.run_static_per_op(batch_size=1, isl=2, osl=2, prefix=0)
        ops = h.handle.evaluate_context_ops(list(range(len(ctx))), batch_size=1, s=4096, prefix=0)
        want = sum(op[1] * mi.transfer.ratio(op[0]) for op in ops) / 1e3
        assert mi.prefill_seconds(4096, 4096 * 4097 / 2) == pytest.approx(want, rel=1e-9)
        assert want != pytest.approx(h.prefill_seconds(4096, 4096 * 4097 / 2), rel=1e-3)

    def test_a_decode_moves_with_hbm_bandwidth_and_the_link(self, pair):
        mi, h = pair
        ratio = mi.decode_seconds(32, 32 * 2048) / h.decode_seconds(32, 32 * 2048)
        lo, hi = sorted((mi.transfer.memory, mi.transfer.link))
        assert lo <= ratio <= hi  # a mix of the bandwidth-bound ops and the collectives

    def test_the_summary_says_what_it_was_transferred_from(self, pair):
        from sim.app.run import compute_line

        line = compute_line(pair[0].describe())
        assert "on h200_sxm" in line and "MI300X: H200 kernel efficiencies, scaled by datasheet FLOPs" in line


class TestAutoChooses:
    def _why(self, data, fitted=None):
        from sim.model.pricing import step_model

        got = step_model(scenario_from_dict(data), fitted)
        return got.name, got.why

    def test_the_kernels_where_they_hold_the_gpu_and_model(self):
        assert self._why({**QWEN, "hardware": {"gpu": "H100", "tp_size": 2}})[0] == "aiconfigurator"

    def test_a_transfer_says_so(self):
        name, why = self._why(QWEN)
        assert name == "aiconfigurator" and why.startswith("auto: no MI300X tables")

    def test_a_measured_fit_of_a_gpu_without_tables_beats_a_transfer(self):
        name, why = self._why(QWEN, {"mfu": 0.3, "mbu": 0.6})
        assert name == "roofline" and "measured fit of MI300X" in why

    def test_no_named_gpu_keeps_the_scenarios_figures(self):
        name, why = self._why({**QWEN, "hardware": {"tp_size": 2}})
        assert name == "roofline" and "no hardware.gpu" in why

    def test_without_aiconfigurator_core_the_roofline_says_why(self, monkeypatch):
        import sim.model.aic

        monkeypatch.setattr(sim.model.aic, "_package_dir", lambda: None)
        name, why = self._why(QWEN)
        assert name == "roofline" and "aiconfigurator-core is not installed" in why

    def test_a_quantization_no_measured_gpu_holds_falls_back_with_the_refusal(self):
        name, why = self._why({"name": "f", "model": "deepseek-ai/DeepSeek-V4-Flash", "hicache": {"enabled": False},
                               "hardware": {"gpu": "H200", "tp_size": 8}})  # fmt: skip
        assert name == "roofline" and "cannot price deepseek-ai/DeepSeek-V4-Flash on h200_sxm" in why


@pytest.mark.parametrize(("model", "gpu", "reference"), [("deepseek-ai/DeepSeek-V4-Pro", "MI355X", "B300"),
                                                       ("sgl-project/DeepSeek-V4-Flash-FP8", "H20", "H100")])  # fmt: skip
def test_validate_says_what_a_gpu_without_tables_was_transferred_from(tmp_path, model, gpu, reference):
    from sim.scenario.validate import validate_file

    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nmodel: {model}\nhardware: {{gpu: {gpu}, tp_size: 8}}\nhicache: {{enabled: false}}\n")
    assert (f"aiconfigurator (measured SGLang kernels), {gpu}: {reference} kernel efficiencies, scaled by datasheet "
            "FLOPs" in validate_file(path))  # fmt: skip


def test_gb300_prices_on_its_own_tables():
    # aiconfigurator-core 0.12.0 names the Grace-Blackwell trays gb200 and gb300 (systems/gb200.yaml, gb300.yaml)
    from sim.model.pricing import step_model

    sc = scenario_from_dict({"name": "g", "model": "deepseek-ai/DeepSeek-V4-Pro", "hicache": {"enabled": False},
                             "hardware": {"gpu": "GB300", "tp_size": 8}})  # fmt: skip
    steps = step_model(sc)
    assert steps.setup.system == "gb300" and steps.transfer is None
