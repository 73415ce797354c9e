"""A PD decode instance in time, with HiSparse on and off."""

import numpy as np
import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.hisparse.decode import decode_shape
from sim.hisparse.topk import ParametricAccess, TopkTrace, save_topk_trace
from sim.offline.hisparsecalls import HiSparseDriver
from sim.scenario.load import scenario_from_dict


def decode_scenario(enabled: bool, compute: dict | None = None, **hisparse):
    return scenario_from_dict({
        "name": "d", "seed": 2, "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 4},
        "cluster": {"role": "decode"}, "scheduler": {"max_running_requests": 64}, "compute": compute or {},
        "hisparse": {"enabled": enabled, "device_buffer_size": 1024, "step_windows": 2, "window_steps": 64,
                     **hisparse},
        "workload": {"kind": "synthetic", "rate": 100.0, "num_requests": 60, "input_length": 32768,
                     "output_length": 512},
    }, source="test")  # fmt: skip


@pytest.fixture(scope="module")
def runs():
    return run_scenario(decode_scenario(False)), run_scenario(decode_scenario(True))


def test_every_request_finishes(runs):
    for run in runs:
        assert run.summary["requests"]["finished"] == 60


def test_hisparse_keeps_less_per_request_on_the_gpu_and_runs_a_larger_batch(runs):
    off, on = (r.summary["hisparse"] for r in runs)
    assert on["bytes_per_request"] < off["bytes_per_request"]
    assert on["peak_batch"] > off["peak_batch"]
    assert on["peak_batch"] <= on["max_batch_hisparse"] and off["peak_batch"] <= off["max_batch_baseline"]


def test_swap_in_costs_step_time_only_with_hisparse(runs):
    off, on = runs
    assert "swap_in_share" not in off.summary["hisparse"] and "misses" not in off.tables  # off: no hot buffer
    assert 0.0 < on.summary["hisparse"]["swap_in_share"] < 1.0
    assert on.summary["tpot_s"]["mean"] > 0


def test_a_request_decodes_after_it_is_admitted(runs):
    for run in runs:
        df = run.requests
        assert (df["first_token_s"] > df["admitted_s"]).all()
        assert (df["finish_s"] >= df["first_token_s"]).all()


def test_the_run_writes_its_per_step_misses(runs):
    misses = runs[1].tables["misses"]
    assert {"step", "request", "layer", "misses", "policy", "device_buffer_size"} <= set(misses.columns)
    assert (misses["device_buffer_size"] == 1024).all() and misses["misses"].ge(0).all()


def test_a_larger_buffer_misses_less_on_the_same_accesses():
    small = run_scenario(decode_scenario(True, device_buffer_size=1024)).summary["hisparse"]
    large = run_scenario(decode_scenario(True, device_buffer_size=4096)).summary["hisparse"]
    assert large["misses_per_step"] <= small["misses_per_step"]


def test_a_decode_instance_needs_an_open_loop_workload():
    data = decode_scenario(True).model_dump()
    data["workload"] = {"kind": "multi_turn"}
    with pytest.raises(InputError, match="workload.kind"):
        run_scenario(scenario_from_dict(data, source="test"))


def test_admission_fills_sglangs_pools_and_reports_which_one_caps_the_batch(runs):
    off, on = (r.summary["hisparse"] for r in runs)
    for h in (off, on):
        pools = h["pools"]
        final = -(-(32768 + 512) // 256) * 256  # prompt + max new tokens, page-aligned
        assert h["batch_limit"] == "full" and h["max_batch"] == pools["full_tokens"] // final
        assert h["peak_batch"] == h["max_batch"]  # 60 requests arrive at once: the pool fills
    assert on["pools"]["c4_device_slots"] == on["pools"]["full_tokens"] // (4 * 2)
    assert on["pools"]["bytes_per_full_token"] < off["pools"]["bytes_per_full_token"]


def test_a_larger_host_to_device_ratio_runs_a_larger_batch():
    r2 = run_scenario(decode_scenario(True, device_buffer_size=512)).summary["hisparse"]
    r10 = run_scenario(decode_scenario(True, device_buffer_size=512, host_to_device_ratio=10)).summary["hisparse"]
    assert r10["host_to_device_ratio"] == 10 and r10["peak_batch"] > r2["peak_batch"]
    # With 1,024-slot buffers the 10x smaller C4 pool holds fewer buffers than the full pool holds requests.
    r10_big = run_scenario(decode_scenario(True, host_to_device_ratio=10)).summary["hisparse"]
    assert r10_big["batch_limit"] == "c4_buffer"
    assert r10_big["max_batch"] == r10_big["pools"]["c4_device_slots"] // (1024 + 64)


def test_the_scheduler_overhead_overlaps_the_gpu_step():
    """SGLang's overlap loop: a step lasts max(CPU scheduling, GPU forward), not their sum."""
    slow_cpu = run_scenario(decode_scenario(False, compute={"step_overhead_ms": 50.0})).summary
    assert slow_cpu["tpot_s"]["mean"] == pytest.approx(0.050, rel=1e-6)
    fast_cpu = run_scenario(decode_scenario(False, compute={"step_overhead_ms": 0.0})).summary
    gpu_only = run_scenario(decode_scenario(False, compute={"step_overhead_ms": 1e-3})).summary
    assert fast_cpu["tpot_s"]["mean"] == pytest.approx(gpu_only["tpot_s"]["mean"])
    assert fast_cpu["tpot_s"]["mean"] < 0.050


def test_the_staging_path_is_selectable():
    direct = run_scenario(decode_scenario(True)).summary["hisparse"]
    staging = run_scenario(decode_scenario(True, initial_fill="staging")).summary["hisparse"]
    assert (direct["initial_fill"], staging["initial_fill"]) == ("direct", "staging")
    assert staging["misses_per_step"] != direct["misses_per_step"]


def test_a_decode_instance_sizes_its_swa_pool_by_ratio_not_cap_mode():
    from sim.app.run import check_startable

    data = decode_scenario(True).model_dump()
    data["hicache"]["swa_full_tokens_ratio"] = "cap"
    sc = scenario_from_dict(data, source="test")
    for start in (check_startable, run_scenario):
        with pytest.raises(InputError, match="swa_full_tokens_ratio: cap mode is modelled for serving instances"):
            start(sc)


def test_the_engine_decides_as_hicache_sim_hisparse_on_the_same_decode_steps(tmp_path):
    """The timed decode engine's per-step misses are the ``hisparse`` command's answers to the same steps: two
    requests x two C4 layers whose compressed prompts fit the 256-slot buffer and cross it while decoding."""
    h, k, steps = 256, 64, 120
    rng = np.random.default_rng(7)
    streams = {(r, layer): ParametricAccess().stream(r, layer, 4 * h - 40 + 8 * r, steps, k, rng)
               for r in range(2) for layer in range(2)}  # fmt: skip
    keys = sorted(streams)
    trace = TopkTrace.from_rows(
        np.array([s for _ in keys for s in range(steps)]), np.repeat([r for r, _ in keys], steps),
        np.repeat([layer for _, layer in keys], steps), np.concatenate([streams[key].seq_len for key in keys]),
        [row[row >= 0] for key in keys for row in streams[key].ids])  # fmt: skip
    save_topk_trace(tmp_path / "topk.npz", trace)
    run = run_scenario(scenario_from_dict({
        "name": "d", "seed": 2, "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 40},
        "cluster": {"role": "decode"}, "scheduler": {"max_running_requests": 8},
        "hisparse": {"enabled": True, "device_buffer_size": h, "top_k": k, "sample_requests": 2, "step_windows": None,
                     "access": {"kind": "trace", "trace_path": str(tmp_path / "topk.npz"), "layers_simulated": 2}},
        "workload": {"kind": "synthetic", "rate": 100.0, "num_requests": 4, "input_length": 4 * h,
                     "output_length": steps},
    }, source="test"))  # fmt: skip
    engine = run.tables["misses"].set_index(["request", "layer", "step"])

    calls = [{"op": "config", "device_buffer_size": h, "top_k": k, "layers": 2}]
    calls += [{"op": "arrive", "rid": r, "prompt_len": int(streams[r, 0].seq_len[0]) - 1} for r in range(2)]
    calls += [{"op": "step", "reqs": [{"rid": r, "seq_len": int(streams[r, 0].seq_len[s]),
                                       "topk": [streams[r, layer].ids[s].tolist() for layer in range(2)]}
                                      for r in range(2)]} for s in range(steps)]  # fmt: skip
    driver = HiSparseDriver()
    answers = [a for call in calls for a in driver(call)]
    assert len(answers) == len(engine) == 2 * 2 * steps
    assert any(a["fast"] for a in answers) and any(not a["fast"] and a["misses"] for a in answers)  # it crosses
    for a in answers:
        row = engine.loc[(a["rid"], a["layer"], a["step"])]
        assert (row["misses"], row["accesses"]) == (a["misses"], a["hits"] + a["misses"]), a


def test_the_model_is_named_in_any_case_as_a_model_path_names_it():
    assert decode_shape("DeepSeek-V4-Flash", 1e9) == decode_shape("deepseek-v4-flash", 1e9)
    assert decode_shape("DeepSeek-V4-Pro", 1e9).name == "DeepSeek-V4-Pro"
    with pytest.raises(InputError, match="HiSparse decode is modelled for"):
        decode_shape("Qwen3-14B", 1e9)


def test_the_engine_takes_one_event_per_batch_change_not_one_per_step(monkeypatch):
    """Steps between two decisions (a finish, the step an arrival joins at) run as one event."""
    import simpy

    events = []
    step = simpy.Environment.step
    monkeypatch.setattr(simpy.Environment, "step", lambda env: (events.append(1), step(env))[1])
    run = run_scenario(decode_scenario(True))
    steps = run.summary["engine"]["steps"]
    assert steps > 512 and len(events) < steps / 4  # 60 requests x 512 steps in batches of up to 64
    assert run.summary["requests"]["finished"] == 60


def test_a_run_with_a_horizon_stops_at_the_step_across_it():
    sc = decode_scenario(True)
    full = run_scenario(sc).summary
    cut = run_scenario(sc.model_copy(update={"duration_s": full["simulated_s"] / 2})).summary
    assert cut["simulated_s"] == full["simulated_s"] / 2
    assert cut["engine"]["busy_s"] <= cut["simulated_s"] and 0 < cut["engine"]["steps"] < full["engine"]["steps"]
    assert 0 < cut["requests"]["finished"] < 60 and cut["requests"]["unfinished"] > 0
