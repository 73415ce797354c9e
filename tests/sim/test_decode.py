"""A PD decode instance in time, with HiSparse on and off."""

import pytest

from sim.errors import InputError
from sim.run import run_scenario
from sim.scenario import scenario_from_dict


def decode_scenario(enabled: bool, **hisparse):
    return scenario_from_dict({
        "name": "d", "seed": 2, "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 4},
        "cluster": {"role": "decode"},
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
    assert off.summary["hisparse"]["swap_in_share"] == 0.0
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
