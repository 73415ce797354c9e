"""HiSparse on DSA models: pools, host mirror, batch bounds and per-step swap-in price as SGLang 0.5.23 sizes
them, and a DSA decode instance in time."""

import pytest

from sim.app.run import run_scenario
from sim.hisparse.dsa import dsa_pools, dsa_sizing, spec_scratch_slots, swap_in_step_seconds
from sim.model.costs import default_cost_table
from sim.model.dsa import dsa_layout
from sim.model.modelcfg import load_config
from sim.scenario.load import scenario_from_dict

KV = 30e9


@pytest.fixture(scope="module")
def glm51():
    return dsa_layout(load_config("glm-5.1-fp8")[0], "bfloat16")


@pytest.fixture(scope="module")
def glm52():
    return dsa_layout(load_config("glm-5.2-fp8")[0], "fp8_e4m3")


def test_pools_divide_the_kv_memory_by_the_cell_and_hisparse_multiplies_the_logical_ids(glm51):
    off, on = dsa_pools(glm51, KV), dsa_pools(glm51, KV, 8)
    for p in (off, on):
        assert p.device_slots % 64 == 0 and p.device_slots * p.bytes_per_token <= KV
        assert (p.device_slots + 64) * p.bytes_per_token > KV
    assert off.logical_tokens == off.device_slots and off.host_tokens == 0
    assert on.logical_tokens == 8 * on.device_slots
    assert on.host_tokens == (on.logical_tokens // 64 + 1) * 64  # one padding page
    assert on.host_bytes == on.host_tokens * 78 * 1152  # the latent of every layer, on each rank


def test_the_indexer_caps_the_capacity_gain(glm51):
    gains = [dsa_sizing(glm51, KV, 40_000, r, 4096, 1024).capacity_gain for r in (5, 8, 10, 100)]
    assert gains == sorted(gains)
    assert all(g < r for g, r in zip(gains, (5, 8, 10, 100)))
    bound = (glm51.kv_row_bytes + glm51.indexer_row_bytes) / glm51.indexer_row_bytes
    assert bound * 0.9 < gains[-1] < bound  # the indexer keys of every logical id stay on the GPU


def test_a_request_holds_its_padded_buffer_and_its_spec_scratch(glm51):
    assert spec_scratch_slots(0, 2048, 4096) == 0
    assert spec_scratch_slots(4, 2048, 4096) == 4096  # max(1024, 8192 - 4096)
    assert spec_scratch_slots(2, 2048, 4096) == 1024
    plain, spec = dsa_sizing(glm51, KV, 40_000, 8, 4096, 4096), dsa_sizing(glm51, KV, 40_000, 8, 4096, 4096, 4)
    assert plain.per_request_device == 4096 + 64 and spec.per_request_device == 4096 + 64 + 4096
    assert spec.max_batch_hisparse <= plain.max_batch_hisparse


def test_max_batch_is_the_least_of_its_bounds(glm51):
    z = dsa_sizing(glm51, KV, 40_000, 8, 4096, 4096)
    assert z.max_batch_baseline == z.baseline.logical_tokens // 40_000 and z.limit_baseline == "kv_pool"
    bounds = {"logical": z.hisparse.logical_tokens // 40_000, "device_buffer": z.hisparse.device_slots // 4160}
    assert z.max_batch_hisparse == min(bounds.values()) and z.limit_hisparse == min(bounds, key=bounds.get)
    assert dsa_sizing(glm51, KV, 40_000, 8, 4096, 3).max_batch_hisparse == 3


def test_anchors_swap_in_synchronously_and_skip_layers_only_wait_beyond_a_layers_compute(glm51, glm52):
    costs = default_cost_table()
    anchor = costs.swap_in_seconds(32, 2048, 3200, glm51.kv_row_bytes)
    assert swap_in_step_seconds(glm51, costs, 32, 3200, 1.0) == pytest.approx(78 * anchor)  # every layer an anchor
    a52 = costs.swap_in_seconds(32, 2048, 3200, glm52.kv_row_bytes)
    copy = costs.transfer_seconds("h2d", "kernel", 3200, glm52.kv_row_bytes)
    assert swap_in_step_seconds(glm52, costs, 32, 3200, 1.0) == pytest.approx(glm52.anchors * a52)  # hidden
    assert swap_in_step_seconds(glm52, costs, 32, 3200, 0.0) == pytest.approx(glm52.anchors * a52 + 57 * copy)
    assert swap_in_step_seconds(glm52, costs, 0, 0, 0.0) == 0.0


def dsa_decode_scenario(enabled: bool, ratio: int = 8):
    return scenario_from_dict({
        "name": "dsa", "seed": 3, "model": {"name": "GLM-5.1-FP8", "config": "glm-5.1-fp8"},
        "hardware": {"kv_mem_gb": 20, "tp_size": 8}, "cluster": {"role": "decode"},
        "scheduler": {"max_running_requests": 64},
        "hisparse": {"enabled": enabled, "device_buffer_size": 4096, "host_to_device_ratio": ratio,
                     "step_windows": 1, "window_steps": 32},
        "workload": {"kind": "synthetic", "rate": 100.0, "num_requests": 40, "input_length": 16384,
                     "output_length": 128},
    }, source="test")  # fmt: skip


@pytest.fixture(scope="module")
def runs():
    return run_scenario(dsa_decode_scenario(False)), run_scenario(dsa_decode_scenario(True))


def test_a_dsa_decode_instance_runs_with_sglangs_sizing(runs):
    off, on = (r.summary for r in runs)
    lay = dsa_layout(load_config("glm-5.1-fp8")[0], "auto")
    z = dsa_sizing(lay, 20e9, 16384 + 128, 8, 4096, 64)
    for s in (off, on):
        assert s["requests"]["finished"] == 40
        h = s["hisparse"]
        assert h["family"] == "dsa" and h["max_batch_baseline"] == z.max_batch_baseline
        assert h["max_batch_hisparse"] == z.max_batch_hisparse and h["capacity_gain"] == pytest.approx(z.capacity_gain)
        assert h["host_pool_bytes_per_rank"] == z.hisparse.host_bytes
    assert off["hisparse"]["peak_batch"] <= z.max_batch_baseline < on["hisparse"]["peak_batch"]
    assert on["hisparse"]["swap_in_share"] > 0


def test_a_host_ratio_whose_pools_outgrow_the_node_is_refused_by_its_field():
    from sim.base.errors import InputError

    doc = dsa_decode_scenario(True).model_dump(mode="json", exclude={"origins"})
    doc["hicache"]["enabled"] = False
    doc["hardware"]["host_mem_gb"] = 400.0  # 8 ranks x 83.5 GB at ratio 8 do not fit, x 32.5 GB at ratio 2 do
    with pytest.raises(InputError, match=r"hisparse.host_to_device_ratio: HiSparse's host pools \("):
        scenario_from_dict(doc, source="test")
    doc["hisparse"]["host_to_device_ratio"] = 2
    assert scenario_from_dict(doc, source="test").hisparse.host_to_device_ratio == 2


def test_validate_prints_the_dsa_hisparse_pools(tmp_path):
    import yaml

    from sim.scenario.validate import validate_file

    path = tmp_path / "dsa.yaml"
    path.write_text(yaml.safe_dump(dsa_decode_scenario(True).model_dump(mode="json", exclude={"origins"})))
    line = validate_file(path).splitlines()[-1]
    lay = dsa_layout(load_config("glm-5.1-fp8")[0], "auto")
    on, off = dsa_pools(lay, 20e9, 8), dsa_pools(lay, 20e9)
    assert line.startswith("  hisparse  DSA, bfloat16 KV, 78 anchor + 0 shared-index layers: ")
    assert f"{on.logical_tokens:,} KV tokens a rank at ratio 8 (off {off.logical_tokens:,}" in line
    assert f"host pool {on.host_bytes / 1e9:,.1f} GB a rank" in line


def test_a_recorded_c4_trace_is_refused_for_a_dsa_model():
    from sim.base.errors import InputError

    doc = dsa_decode_scenario(True).model_dump(mode="json", exclude={"origins"})
    doc["hisparse"]["access"] = {"kind": "trace", "trace_path": "t.parquet"}
    with pytest.raises(InputError, match="hisparse.access.kind: a recorded top-k trace holds DeepSeek V4's C4 rows"):
        scenario_from_dict(doc, source="test", check_files=False)


def test_bench_serving_steps_run_one_after_the_other_each_at_its_concurrency():
    doc = dsa_decode_scenario(True).model_dump(mode="json", exclude={"origins"})
    doc["workload"] = {"kind": "bench_serving", "steps": [
        {"random_input_len": 8192, "random_output_len": 32, "random_range_ratio": 1.0, "num_prompts": n,
         "max_concurrency": c} for n, c in ((4, 1), (8, 4))]}  # fmt: skip
    run = run_scenario(scenario_from_dict(doc, source="test"))
    df = run.requests.sort_values("arrival_s")
    first, second = df[df["round"] == 0], df[df["round"] == 1]
    assert len(first) == 4 and len(second) == 8
    assert second["arrival_s"].min() >= first["finish_s"].max()  # the second step waits for the first
    # concurrency 1: each request is sent when the previous one finished
    assert (first["arrival_s"].to_numpy()[1:] >= first["finish_s"].to_numpy()[:-1] - 1e-9).all()
    assert run.summary["hisparse"]["peak_batch"] == 4


def dsa_misses_run(input_len: int, output_len: int, windows: int, window_steps: int):
    doc = dsa_decode_scenario(True).model_dump(mode="json", exclude={"origins"})
    doc["hisparse"].update(step_windows=windows, window_steps=window_steps)
    doc["workload"] = {"kind": "bench_serving", "steps": [{"random_input_len": input_len, "random_output_len": output_len,
                                                           "random_range_ratio": 1.0, "num_prompts": 2}]}  # fmt: skip
    return run_scenario(scenario_from_dict(doc, source="test"))


def test_dsa_decode_misses_start_the_step_the_raw_length_passes_the_buffer():
    """A DSA kernel sees ``seq_len`` itself (dsa_backend.py:2623-2628; compress_ratio 1, allocator/hisparse.py:36):
    a 4,088-token prompt preloaded into a 4,096-slot buffer leaves the fast path at its 9th step (seq_len 4,097, the
    newest in the reserved slot) and misses the previous newest from the 10th on. Read as C4 rows (a quarter of
    the length, the old path) it stayed on the fast path for 35 steps."""
    m = dsa_misses_run(4096 - 8, 64, 1, 32).tables["misses"].pivot_table("misses", "step", ["request", "layer"])
    assert list(m.index) == list(range(32))
    assert (m.loc[:8] == 0).all().all()
    assert (m.loc[9:] >= 1).all().all()


def test_dsa_decode_backs_up_every_step_and_samples_windows_spread_over_the_output():
    """SGLang's DSA branch backs up the previous token every decode step but the first after admission
    (hisparse_coordinator.py:1191-1215 with compress_ratio 1), every layer's latent row (:1248); the sampled
    windows cover the output as V4's do (the first window's steps, the last's)."""
    run = dsa_misses_run(16384, 128, 2, 16)
    lay = dsa_layout(load_config("glm-5.1-fp8")[0], "auto")
    assert run.summary["hisparse"]["d2h_backup_bytes_sampled"] == 2 * (128 - 1) * lay.layers * lay.kv_row_bytes
    steps = sorted(run.tables["misses"]["step"].unique())
    assert steps == list(range(16)) + list(range(112, 128))
