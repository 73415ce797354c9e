"""``compute.backend: aiconfigurator``: passes priced from aiconfigurator-core's measured SGLang kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.base.errors import InputError
from sim.model.compute import Roofline, attention_pairs
from sim.model.pricing import step_model
from sim.scenario.load import scenario_from_dict

pytest.importorskip("aiconfigurator_core")

from aiconfigurator_core.sdk.engine import EngineHandle  # noqa: E402

from sim.model.aic import SGLANG_VERSION, AicSteps, coverage_error  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
QWEN = {"name": "aic", "model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "H100", "tp_size": 2},
        "compute": {"backend": "aiconfigurator"}}  # fmt: skip


def scenario(**over):
    data = {**QWEN, **over}
    return scenario_from_dict(data)


@pytest.fixture(scope="module")
def steps() -> AicSteps:
    return step_model(scenario())


@pytest.fixture(scope="module")
def direct():
    """The same estimator, compiled straight from aiconfigurator-core, not through the backend."""
    return EngineHandle.compile("Qwen/Qwen3-30B-A3B", "h100_sxm", "sglang", backend_version=SGLANG_VERSION,
                                tp_size=2, moe_tp_size=2, moe_ep_size=1)  # fmt: skip


class TestAPassIsADirectQuery:
    """On the memo's grid a pass is the estimator's own answer; between grid points, within 4% of it."""

    def test_a_prefill_chunk_behind_a_cached_prefix(self, steps, direct):
        got = steps.step_seconds(3072, attention_pairs(3072, 6144), 0, 0.0, 1)
        assert got == pytest.approx(direct.predict_prefill_latency(1, 9216, 6144) / 1e3, rel=1e-12)

    def test_a_prefill_batch_of_equal_chunks(self, steps, direct):
        got = steps.step_seconds(4096, 2 * attention_pairs(2048, 1024), 0, 0.0, 2)
        assert got == pytest.approx(direct.predict_prefill_latency(2, 3072, 1024) / 1e3, rel=1e-12)

    def test_a_decode_batch_at_its_mean_context(self, steps, direct):
        got = steps.step_seconds(0, 0.0, 32, 32 * 6144.0)
        assert got == pytest.approx(direct.decode_step_latency(32, 6143, 0) / 1e3, rel=1e-12)

    def test_between_grid_points_it_stays_within_4_percent(self, steps, direct):
        rng = np.random.default_rng(7)
        for _ in range(12):
            n, chunk, prefix = int(rng.integers(1, 4)), int(rng.integers(65, 8192)), int(rng.integers(0, 60000))
            got = steps.prefill_seconds(n * chunk, n * attention_pairs(chunk, prefix), n)
            assert got == pytest.approx(direct.predict_prefill_latency(n, chunk + prefix, prefix) / 1e3, rel=0.04)
            ctx = int(rng.integers(65, 100000))
            assert steps.decode_seconds(n * 8, n * 8 * ctx) == pytest.approx(
                direct.decode_step_latency(n * 8, ctx - 1, 0) / 1e3, rel=0.04)  # fmt: skip

    def test_a_mixed_pass_shares_the_weights_between_its_chunk_and_its_rows(self, steps):
        prefill = steps.step_seconds(2048, attention_pairs(2048, 0), 0, 0.0)
        decode = steps.step_seconds(0, 0.0, 16, 16 * 4000.0)
        mixed = steps.step_seconds(2048, attention_pairs(2048, 0), 16, 16 * 4000.0)
        assert prefill < mixed < prefill + decode

    def test_longer_contexts_cost_more(self, steps):
        assert steps.decode_seconds(8, 8 * 1000) < steps.decode_seconds(8, 8 * 64000)
        assert steps.prefill_seconds(1024, attention_pairs(1024, 0)) < steps.prefill_seconds(
            1024, attention_pairs(1024, 60000))  # fmt: skip


class _Counting:
    def __init__(self, handle) -> None:
        self.handle, self.calls = handle, 0

    def __getattr__(self, name):
        self.calls += 1
        return getattr(self.handle, name)


def test_a_shape_is_asked_once_and_answers_the_same_every_time(steps):
    counted = AicSteps(_Counting(steps.handle), steps.setup)
    first = [counted.step_seconds(1500, attention_pairs(1500, 700), 0, 0.0),
             counted.step_seconds(0, 0.0, 12, 12 * 3000.0)]  # fmt: skip
    calls = counted.handle.calls
    again = [counted.step_seconds(1500, attention_pairs(1500, 700), 0, 0.0),
             counted.step_seconds(0, 0.0, 12, 12 * 3000.0)]  # fmt: skip
    assert again == first and 0 < counted.handle.calls == calls <= 6  # 4 prefill corners, 2 decode points
    assert first == [steps.step_seconds(1500, attention_pairs(1500, 700), 0, 0.0),
                     steps.step_seconds(0, 0.0, 12, 12 * 3000.0)]  # fmt: skip


def test_the_scheduler_overhead_is_added_only_when_the_scenario_sets_it(steps):
    with_overhead = step_model(scenario(compute={"backend": "aiconfigurator", "step_overhead_ms": 3.0}))
    assert steps.overhead_s == 0.0 and with_overhead.overhead_s == 0.003
    assert with_overhead.step_seconds(0, 0.0, 4, 4000.0) == pytest.approx(steps.step_seconds(0, 0.0, 4, 4000.0) + 0.003)


class TestWhatTheDatabaseLacksIsRefused:
    def test_a_gpu_outside_the_catalog_names_hardware_gpu(self):
        # no datasheet to carry measured kernels by (a catalog GPU the tables lack is transferred: test_transfer.py)
        with pytest.raises(InputError, match=r"hardware\.gpu: L40S is not a catalog GPU"):
            scenario(hardware={"gpu_name": "L40S", "tp_size": 2})

    def test_a_model_it_ships_no_config_for_names_the_model(self):
        with pytest.raises(InputError, match=r"model\.name: aiconfigurator-core ships no config for 'qwen3-14b'"):
            scenario(model={"name": "qwen3-14b", "config": "qwen3-14b"})

    def test_fp4_experts_on_hopper_are_refused_in_one_line_exit_2_before_any_work(self, tmp_path, capsys):
        from sim.app.cli import main

        path = tmp_path / "s.yaml"
        path.write_text("name: s\nmodel: deepseek-ai/DeepSeek-V4-Flash\nhardware: {gpu: H200, tp_size: 4}\n"
                        "compute: {backend: aiconfigurator}\n")  # fmt: skip
        assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and not (tmp_path / "out").exists()
        assert "model.name: " in err and "MoE data missing" in err and "model.expert_dtype: fp8" in err

    def test_without_the_extra_the_backend_asks_for_it(self, monkeypatch):
        import sim.model.aic

        sc = scenario()
        monkeypatch.setattr(sim.model.aic, "_package_dir", lambda: None)
        assert coverage_error(sc) == ("compute.backend", "aiconfigurator-core is not installed (its wheel is built "
                                      "for Python 3.11-3.13 (cp311-abi3); run on one of those)")  # fmt: skip


def test_sim_runs_on_the_roofline_without_the_extra():
    code = ("import sys; sys.modules['aiconfigurator_core'] = None\n"
            "from sim.app.cli import main\n"
            "sys.exit(main(['validate', 'scenarios/quickstart.yaml']))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_run_says_which_backend_priced_its_passes(tmp_path, capsys):
    from sim.app.run import run_scenario

    work = {"kind": "multi_turn", "num_clients": 4, "max_parallel": 2, "num_rounds": 2, "request_length": 512,
            "output_length": 8, "request_rate": None}  # fmt: skip
    aic = run_scenario(scenario(workload=work)).summary["compute"]
    roof = run_scenario(scenario(workload=work, compute={"backend": "roofline"})).summary["compute"]
    assert aic["backend"] == "aiconfigurator" and aic["system"] == "h100_sxm" and aic["shapes_priced"] > 0
    assert roof["backend"] == "roofline"
    assert isinstance(step_model(scenario(compute={"backend": "roofline"})), Roofline)
    auto = step_model(scenario(compute={}))  # the default, auto: H100 and the model are in the database
    assert auto.name == "aiconfigurator" and auto.why.startswith("auto: ") and auto.transfer is None


def test_hisparse_decode_steps_are_the_estimators_decode_pass_plus_the_swap_ins():
    from sim.app.run import run_scenario

    def decode(**compute):
        return scenario_from_dict({
            "name": "d", "seed": 2, "model": {"name": "deepseek-v4-flash", "config": "deepseek-v4-flash", "expert_dtype": "fp8"},
            "hardware": {"kv_mem_gb": 4, "gpu_name": "H200"}, "cluster": {"role": "decode"},
            "scheduler": {"max_running_requests": 16}, "compute": compute,
            "hisparse": {"enabled": True, "device_buffer_size": 1024, "step_windows": 1, "window_steps": 32},
            "workload": {"kind": "synthetic", "rate": 100.0, "num_requests": 8, "input_length": 16384,
                         "output_length": 32},
        })  # fmt: skip

    sc = decode(backend="aiconfigurator")
    run = run_scenario(sc).summary
    assert run["compute"]["backend"] == "aiconfigurator" and run["requests"]["finished"] == 8
    steps = step_model(sc)
    # A step lies between the estimator's decode pass of one request and of the whole batch (plus swap-ins).
    mean_step = run["engine"]["busy_s"] / run["engine"]["steps"]
    assert steps.decode_seconds(1, 16384) <= mean_step <= steps.decode_seconds(8, 8 * 16416) * 1.2
    assert run_scenario(decode()).summary["compute"]["backend"] == "roofline"


def test_attention_dp_expert_parallel_and_draft_tokens_reach_the_estimator():
    from types import SimpleNamespace as NS

    from sim.model.aic import _compiled, _setup

    sc = NS(hardware=NS(gpu="H100", gpu_name="H100", tp_size=4, dp_size=4, enable_dp_attention=True, ep_size=4),
            model=NS(name="Qwen/Qwen3-30B-A3B", config=None, expert_dtype="auto", kv_dtype="auto"),
            speculative=NS(algorithm="EAGLE", num_steps=3))  # fmt: skip
    setup = _setup(sc, "h100_sxm")
    assert (setup.tp, setup.attention_dp, setup.moe_tp, setup.moe_ep, setup.nextn) == (1, 4, 1, 4, 3)
    sc.speculative = NS(algorithm=None, num_steps=3)
    plain = _setup(sc, "h100_sxm")
    assert plain.nextn == 0
    spec, base = AicSteps(_compiled(setup)[0], setup), AicSteps(_compiled(plain)[0], plain)
    assert spec.decode_seconds(8, 8 * 4096) > base.decode_seconds(8, 8 * 4096)  # 4 tokens verified a request


def test_the_same_scenario_gives_the_same_summary_however_warm_the_estimator():
    from sim.app.run import run_scenario, summary_json

    work = {"kind": "multi_turn", "num_clients": 3, "max_parallel": 2, "num_rounds": 2, "request_length": 700,
            "output_length": 6, "request_rate": None}  # fmt: skip
    first, second = (summary_json(run_scenario(scenario(workload=work)).summary) for _ in range(2))
    assert first == second


def test_a_quantization_the_tables_lack_names_model_expert_dtype():
    sc = scenario(model={"name": "deepseek-v4-flash", "config": "deepseek-v4-flash", "expert_dtype": "fp4"},
                  hardware={"gpu": "H200", "tp_size": 4})
    with pytest.raises(InputError, match=r"^model\.expert_dtype: .*cannot price deepseek-ai/DeepSeek-V4-Flash"):
        step_model(sc)


def test_a_speculative_prefill_adds_the_drafts_extend_the_estimator_leaves_out(steps):
    from sim.model.speculative import SpecDecode

    spec = SpecDecode(num_steps=3, topk=1, draft_tokens=4, accept_length=2.5, draft_share=1 / 48)
    target = steps.step_seconds(4096, attention_pairs(4096, 0), 0, 0.0)
    assert spec.prefill_seconds(steps, 4096, attention_pairs(4096, 0)) == pytest.approx(target * (1 + 1 / 48))


def test_v4_fp4_experts_on_blackwell_price_on_the_kernels_sglang_runs_them_with():
    sc = scenario(model="deepseek-ai/DeepSeek-V4-Flash", hardware={"gpu": "B200", "tp_size": 4})
    got = step_model(sc)
    assert got.setup.moe_quant == "w4a8_mxfp4_mxfp8_trtllm"  # the estimator's own rule for V4's MXFP4 experts
    direct = EngineHandle.compile("deepseek-ai/DeepSeek-V4-Flash", "b200_sxm", "sglang", backend_version=SGLANG_VERSION,
                                  tp_size=4, moe_tp_size=4, moe_ep_size=1, moe_quant_mode="w4a8_mxfp4_mxfp8_trtllm")  # fmt: skip
    assert got.step_seconds(2048, attention_pairs(2048, 0), 0, 0.0) == pytest.approx(
        direct.predict_prefill_latency(1, 2048, 0) / 1e3, rel=1e-12)  # fmt: skip


class TestTwoBatchOverlap:
    """What two-batch overlap hides (sim.model.tbo), from the estimator's per-op times: V4-Flash on 8 x B200 with
    DP attention 8, whose prefill passes gather and combine over the ranks (the bundled DP scenario)."""

    @pytest.fixture(scope="class")
    def v4(self) -> AicSteps:
        return step_model(scenario_from_dict({
            "name": "tbo", "model": {"name": "DeepSeek-V4-Flash", "config": "deepseek-v4-flash", "expert_dtype": "fp4"},
            "hardware": {"gpu": "B200", "tp_size": 8, "dp_size": 8, "enable_dp_attention": True, "ep_size": 8},
            "compute": {"backend": "aiconfigurator"}, "scheduler": {"enable_two_batch_overlap": True}}))  # fmt: skip

    def test_the_parts_are_the_estimators_prefill_latency_with_its_collectives_apart(self, v4):
        parts = v4.tbo_parts(4096, attention_pairs(4096, 2048), 1)
        direct = v4.handle.predict_prefill_latency(1, 4096 + 2048, 2048) / 1e3
        assert sum(parts) == pytest.approx(direct, rel=1e-9)
        assert parts[1] > 0 and parts[3] > 0  # the gather and the combine are priced

    @pytest.mark.parametrize("tokens", [2048, 8192])
    def test_a_long_prefill_runs_faster_with_its_collectives_hidden(self, v4, tokens):
        from sim.model.tbo import tbo_saving

        pairs = attention_pairs(tokens, 0)
        whole = sum(v4.tbo_parts(tokens, pairs, 1))
        saving = tbo_saving(v4, tokens, pairs, 1, 0.48)
        assert 0 < saving < whole * 0.5
