"""``hicache-sim plan`` on the bundled quickstart: the report's data (plan.json, CSVs), not its prose."""

import json
import shlex
from pathlib import Path

import pandas as pd
import pytest

from sim.app.cli import main
from sim.app.plan.build import parse_slo
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang

ROOT = Path(__file__).resolve().parents[4]
QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")
HISPARSE = str(ROOT / "scenarios" / "hisparse_quick.yaml")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "report"
    decode = tmp_path_factory.mktemp("dec") / "decode.yaml"
    decode.write_text(Path(HISPARSE).read_text().replace("num_requests: 200", "num_requests: 24"))
    code = main(["plan", "--scenario", QUICKSTART, "--set", "workload.num_clients=24", "--slo", "ttft_p90=5s",
                 "--ratios", "1,8", "--node-dram-gb", "12.5", "--seeds", "2", "--decode", str(decode),
                 "--batches", "2,32", "--workers", "2", "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    return out, json.loads((out / "plan.json").read_text())


def test_every_section_is_written_with_its_pictures_and_tables(report):
    out, d = report
    for section in ("host_memory", "value", "write_policy", "l3", "swa", "hisparse", "recommendation"):
        assert section in d
    for name in ("report.md", "host_memory.png", "value.png", "write_policy.png", "l3.png", "swa.png",
                 "hisparse.png", "host_memory.csv", "value_points.csv", "value_curve.csv"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    assert d["failed_runs"] == []


def test_host_memory_adds_up_pool_by_pool_and_refuses_what_sglang_would(report):
    _, d = report
    cands = {c["label"]: c for c in d["host_memory"]["candidates"]}
    for c in cands.values():
        assert c["bytes_per_rank"] == sum(c["pool_bytes_per_rank"].values())
        assert c["bytes_per_node"] == c["bytes_per_rank"] * c["ranks_per_node"]
        if c["ratio"] is not None:
            assert (c["status"] == "refused") == (c["bytes_per_rank"] > c["budget_per_rank"])
    # SGLang cannot auto-size DeepSeek-V4's pools: HiCache without --hicache-ratio does not start
    auto = cands["auto (no --hicache-ratio)"]
    assert auto["status"] == "refused" and "auto-sizing does not support DeepSeekV4TokenToKVPool" in auto["reason"]
    # 12.5 GB less SGLang's 10 GiB reserve leaves ~1.76 GB: ratio 1 (~0.5 GB) starts, ratio 8 (~4 GB) does not
    assert cands["--hicache-ratio 1"]["status"] != "refused"
    assert cands["--hicache-ratio 8"]["status"] == "refused"
    assert "Not enough host memory for V4 paged pool" in cands["--hicache-ratio 8"]["reason"]
    # and the largest ratio that starts lies between them, reported beside the recommendation
    assert 1 <= d["host_memory"]["largest_fitting_ratio"] < 8
    assert f"{d['host_memory']['largest_fitting_ratio']:.3g} (per pool, per rank)" in (report[0] / "report.md").read_text()
    csv = pd.read_csv(report[0] / "host_memory.csv")
    assert list(csv["bytes_per_rank"]) == [c["bytes_per_rank"] for c in d["host_memory"]["candidates"]]


def test_a_refused_candidate_is_never_run_and_never_recommended(report):
    _, d = report
    labels = [p["label"] for p in d["value"]["points"]]
    assert "--hicache-ratio 8" not in labels and "L1 only" in labels


def test_timed_figures_carry_intervals_over_the_seeds(report):
    _, d = report
    for p in d["value"]["points"]:
        for m in ("input_tokens_per_s", "ttft_p90_s", "hit_total"):
            fig = p[m]
            assert fig["n"] == 2 and fig["lo"] <= fig["mean"] <= fig["hi"]


def test_no_timed_hit_rate_passes_the_clairvoyant_ceiling(report):
    _, d = report
    ceiling = max(c["clairvoyant"] for c in d["value"]["curve"])
    assert all(p["hit_total"]["mean"] <= ceiling + 1e-9 for p in d["value"]["points"])
    # the V4 model falls back to replays and says why
    assert d["value"]["curve_exact"] is False and "SWA" in d["value"]["curve_reason"]


def test_the_recommendation_is_the_cheapest_setup_whose_upper_bounds_meet_the_slo(report):
    _, d = report
    target = d["slo"]["ttft_p90_s"]
    meeting = [p for p in d["value"]["points"] if p["ttft_p90_s"]["hi"] <= target]
    rec = d["recommendation"]
    if not meeting:
        assert rec["choice"] is None
        return
    cheapest = min(meeting, key=lambda p: p["host_bytes_per_node"])
    assert rec["choice"] == cheapest["label"]
    words = shlex.split(rec["launch"])
    hicache = from_sglang(rec["launch"], [], gpu="H200").scenario["hicache"]  # the command reads back
    assert hicache["enabled"] == (rec["choice"] != "L1 only")
    if rec["choice"] != "L1 only":
        assert float(words[words.index("--hicache-ratio") + 1]) == pytest.approx(
            next(c["ratio"] for c in d["host_memory"]["candidates"] if c["label"] == rec["choice"]))


@pytest.mark.parametrize("args, says", [
    (["--node-dram-gb", "0"], "--node-dram-gb: must be > 0"),
    (["--node-dram-gb", "nan"], "--node-dram-gb: must be a finite number"),
    (["--ratios", "2,2"], "--ratios 2,2: a value is repeated"),
    (["--ratios", "1e20"], "--ratios 1e20: 1e20: 1e+20 is out of range"),
    (["--seeds", "100000"], "--seeds 100000: at most 1,000 seeds"),
])  # fmt: skip
def test_bad_plan_options_are_one_line_before_any_run(args, says, tmp_path, capsys):
    quickstart = str(Path(__file__).resolve().parents[4] / "scenarios" / "quickstart.yaml")
    assert main(["plan", "--scenario", quickstart, *args, "--out", str(tmp_path / "p"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "p").exists()


@pytest.mark.parametrize("seeds, says", [([1, 2, 3], "95% upper bounds"), ([1], "one seed: no interval")])
def test_the_criterion_says_what_was_compared_with_the_targets(seeds, says):
    from sim.app.plan.build import PlanSpec, _recommend
    from sim.scenario.load import scenario_from_dict

    spec = PlanSpec(scenario_from_dict({"name": "s"}), slo={"ttft_p90_s": 1.0}, seeds=seeds)
    point = {"label": "L1 only", "host_bytes_per_node": 0, "seeds_ok": len(seeds),
             "ttft_p90_s": {"mean": 1.5, "lo": 1.4, "hi": 1.6}}  # fmt: skip
    rec = _recommend(spec, {"value": {"points": [point]}}, [])
    assert rec["choice"] is None and says in rec["criterion"]


def test_write_policies_and_l3_policies_are_side_by_side(report):
    _, d = report
    assert [r["policy"] for r in d["write_policy"]["rows"]] == ["write_through", "write_through_selective",
                                                                 "write_back"]  # fmt: skip
    wt = d["write_policy"]["rows"][0]
    assert "write_through_unbacked_eviction" in wt["dropped_tokens_by_reason"]
    rows = d["l3"]["rows"]
    assert {r["prefetch_policy"] for r in rows} == {"best_effort", "wait_complete", "timeout"}
    for pol in ("best_effort", "wait_complete", "timeout"):
        by_t = {r["prefetch_threshold"]: r for r in rows if r["prefetch_policy"] == pol}
        assert by_t[1024]["prefetches"] <= by_t[64]["prefetches"]  # a higher threshold qualifies fewer


def test_l3s_marginal_value_is_the_hits_it_adds_against_the_bytes_it_writes_per_write_policy(report):
    out, d = report
    rows = {r["write_policy"]: r for r in d["l3"]["marginal"]}
    assert set(rows) == {"write_through", "write_through_selective", "write_back"}
    for r in rows.values():
        assert r["gained"]["mean"] == pytest.approx(r["hit_total_on"]["mean"] - r["hit_total_off"]["mean"])
        assert r["gained"]["lo"] <= r["gained"]["mean"] <= r["gained"]["hi"]
        assert r["l3_write_bytes"]["mean"] >= 0
    # write-through backs up every insert, so it writes more on to storage than the selective policy
    assert rows["write_through"]["l3_write_bytes"]["mean"] > rows["write_through_selective"]["l3_write_bytes"]["mean"] > 0
    assert "### L3's marginal value" in (out / "report.md").read_text()
    assert len(pd.read_csv(out / "l3_marginal.csv")) == 3


def test_the_swa_section_compares_v4_with_the_same_keys_without_a_window(report):
    _, d = report
    first_seen = d["swa"]["missed_first_seen"]
    for r in d["swa"]["rows"]:
        assert r["l1l2_hit_v4"] <= r["l1l2_hit_no_window"] + 1e-9
        assert r["l1l2_lost_to_swa"] == pytest.approx(r["l1l2_hit_no_window"] - r["l1l2_hit_v4"])
        # every input token: a hit without a window, or missed because evicted, or because first seen
        assert r["l1l2_hit_no_window"] + r["l1l2_missed_evicted"] + first_seen == pytest.approx(1.0)
        assert r["l1l2_missed_evicted"] >= -1e-9


def test_hisparse_rows_and_the_crossover_follow_from_the_runs(report):
    _, d = report
    h = d["hisparse"]
    assert [r["batch_cap"] for r in h["rows"]] == [2, 32]
    for r in h["rows"]:
        assert r["speedup"] == pytest.approx(r["on_output_tok_s"] / r["off_output_tok_s"])
    if h["crossover_batch"] is not None:
        assert all(r["speedup"] >= 1 for r in h["rows"] if r["batch_cap"] >= h["crossover_batch"])


class TestSlo:
    def test_units(self):
        assert parse_slo("ttft_p90=2s,itl=50ms") == {"ttft_p90_s": 2.0, "tpot_mean_s": 0.05}

    @pytest.mark.parametrize("text", ["ttft=2s", "ttft_p90=fast", "ttft_p90=-1s", "ttft_p90", "itl=50",
                                      "ttft_p90=2s,ttft_p90=3s", "ttft_p90=infs", "ttft_p90=nanms"])
    def test_bad_targets_are_one_line_errors(self, text):
        with pytest.raises(InputError):
            parse_slo(text)


def test_a_single_pool_model_gets_the_one_pass_curve_checked_against_replays_and_a_progress_bar(capsys, monkeypatch):
    from sim.app.plan.build import PlanSpec, make_plan
    from sim.scenario.load import load_scenario

    monkeypatch.setattr("sim.base.progress.PLAIN_EVERY_S", 0.0)  # off a terminal: a line a run, not every 30 s
    sc = load_scenario(ROOT / "scenarios" / "mla_baseline_multiturn.yaml",
                       ["workload.num_clients=32", "workload.max_parallel=8", "workload.num_rounds=3"])  # fmt: skip
    spec = PlanSpec(sc, ratios=[1.0, 4.0], seeds=[1], policies=["write_through"], l3_policies=["timeout"],
                    l3_thresholds=[256], curve_points=6)  # fmt: skip
    d = make_plan(spec, workers=1, progress=True)
    v = d["value"]
    assert v["curve_exact"] is True
    hits = [p["hit"] for p in v["one_pass_dense"]]
    assert hits == sorted(hits)  # inclusion: more memory never hits less
    assert v["one_pass_max_gap"] < 0.01  # against the tree's replays at the grid's sizes
    assert f"{d['runs']}/{d['runs']} runs" in capsys.readouterr().err  # the bar has its total


@pytest.mark.parametrize("argv, says", [
    (["--scenario", QUICKSTART, "--decode", QUICKSTART], "not a decode instance"),
    (["--scenario", QUICKSTART, "--batches", "1.5"], "expected an integer"),
    (["--scenario", QUICKSTART, "--ratios", "0,2"], "must be > 0"),
    (["--scenario", QUICKSTART, "--pinnable-gb", "0"], "--pinnable-gb"),
    (["--scenario", QUICKSTART, "--trace", "no/such.jsonl"], "no such file"),
    (["--launch", "python -m sglang.launch_server --model-path x"], "needs --gpu"),
])  # fmt: skip
def test_bad_plan_input_is_one_line_and_exit_2_before_anything_is_written(tmp_path, capsys, argv, says):
    out = tmp_path / "report"
    assert main(["plan", *argv, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_launch_command_and_its_bench_client_make_a_plan_whose_command_keeps_the_users_flags(tmp_path):
    out = tmp_path / "report"
    launch = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 8 "
              "--enable-hierarchical-cache --hicache-ratio 2 --port 30001")  # fmt: skip
    bench = ("python bench_multiturn.py --num-clients 16 --max-parallel 8 --num-rounds 2 --request-length 512 "
             "--output-length 16 --disable-auto-run")  # fmt: skip
    assert main(["plan", "--launch", launch, "--gpu", "H200", "--bench", bench, "--ratios", "1,2", "--seeds", "1",
                 "--node-dram-gb", "1000", "--out", str(out), "--no-progress", "--workers", "2"]) == 0  # fmt: skip
    d = json.loads((out / "plan.json").read_text())
    cands = {c["label"]: c for c in d["host_memory"]["candidates"]}
    assert cands["--hicache-ratio 2"]["ranks_per_node"] == 8  # eight TP ranks on one node, each pinning its pools
    assert cands["--hicache-ratio 2"]["bytes_per_node"] == 8 * cands["--hicache-ratio 2"]["bytes_per_rank"]
    rec = d["recommendation"]
    assert rec["choice"] is not None and "--port 30001" in rec["launch"]
    assert shlex.split(rec["launch"]).count("--tp-size") == 1


def _rocm_spec(*sets, **kw):
    from sim.app.plan.build import PlanSpec
    from sim.scenario.load import load_scenario

    sc = load_scenario(QUICKSTART, ["hardware.gpu=MI355X", "hardware.tp_size=8", *sets])
    return PlanSpec(sc, ratios=[2.0, 200.0], node_dram_gb=1000.0, **kw)


@pytest.mark.parametrize("kw, sets, gb, source", [
    ({}, [], 500.0, "ROCm default: half of the node DRAM (1000 GB), amdgpu's GTT size"),
    ({}, ["hardware.pinnable_gb=300"], 300.0, "hardware.pinnable_gb"),
    ({"pinnable_gb": 200.0}, ["hardware.pinnable_gb=300"], 200.0, "--pinnable-gb"),
])  # fmt: skip
def test_plans_pinnable_ceiling_is_the_flag_else_the_field_else_the_platforms_rule(kw, sets, gb, source):
    c = _rocm_spec(*sets, **kw).pin_ceiling
    assert (c.gb, c.source) == (gb, source)


def test_plan_refuses_candidates_past_the_rocm_default_and_fits_the_largest_ratio_under_it():
    from sim.app.plan.build import _host_candidates, _host_section, _Setup
    from sim.model.hostmem import largest_fitting_ratio
    from sim.scenario.load import build_model_spec

    spec = _rocm_spec()
    model = build_model_spec(spec.scenario)
    cands, swa_ratio, l1, auto = _host_candidates(spec, spec.scenario)
    by = {c.label: c for c in cands}
    assert by["--hicache-ratio 2"].status != "refused"
    big = by["--hicache-ratio 200"]  # inside DRAM less the reserve, past half of it
    assert 500e9 < big.per_node < 1000e9 - 8 * 10 * 1024**3
    assert big.status == "refused" and "past the 500 GB the platform lets it pin" in big.reason
    h = _host_section(_Setup(spec, model, cands, swa_ratio, l1, auto))
    assert (h["pinnable_gb"], h["pinnable_source"]) == (500.0, spec.pin_ceiling.source)
    args = dict(l1_pages=l1, swa_ratio=swa_ratio, page_tokens=256, tp_size=8, node_dram_gb=1000.0, gpus_per_node=8)
    assert h["largest_fitting_ratio"] == largest_fitting_ratio(model, **args, pinnable_gb=500.0)
    assert h["largest_fitting_ratio"] < largest_fitting_ratio(model, **args)  # DRAM alone would allow more


def test_a_candidates_run_is_not_refused_by_the_ceiling_the_plan_already_applied():
    from sim.app.plan.build import _candidate_scenario
    from sim.model.hostmem import HostCandidate
    from sim.scenario.load import load_scenario

    sc = load_scenario(QUICKSTART, ["hardware.pinnable_gb=1.5"])  # ratio 2: 1.0 GB pinned
    c = HostCandidate("--hicache-ratio 8", "--hicache-ratio 8", 8.0, None, 275, 2200, 216)
    assert _candidate_scenario(sc, c).hicache.hicache_ratio == 8.0  # 4 GB: the plan's own table prices it


def test_the_hisparse_section_gives_a_dsa_models_sizing(tmp_path):
    """A DSA decode instance (GLM-5.1): the section runs it on and off and reports SGLang's sizing beside."""
    decode = tmp_path / "dsa.yaml"
    decode.write_text(
        "name: dsa\nseed: 1\nmodel: {name: GLM-5.1-FP8, config: glm-5.1-fp8}\nhardware: {gpu: H200, tp_size: 8}\n"
        "cluster: {role: decode}\nhisparse: {enabled: true, host_to_device_ratio: 8, step_windows: 1, "
        "window_steps: 16, sample_requests: 1, access: {layers_simulated: 1}}\n"
        "workload: {kind: synthetic, rate: 50.0, num_requests: 16, input_length: 16384, output_length: 32}\n")
    out = tmp_path / "report"
    assert main(["plan", "--scenario", QUICKSTART, "--set", "workload.num_clients=8", "--ratios", "1",
                 "--seeds", "1", "--decode", str(decode), "--batches", "1,8", "--workers", "1", "--out", str(out),
                 "--no-progress"]) == 0  # fmt: skip
    h = json.loads((out / "plan.json").read_text())["hisparse"]
    z = h["dsa_sizing"]
    assert z["capacity_gain"] > 1 and z["host_to_device_ratio"] == 8 and z["kv_dtype"] == "bfloat16"
    assert z["max_batch_hisparse"] >= z["max_batch_baseline"] and z["host_pool_bytes_per_rank"] > 0  # at cap 8
    assert [r["batch_cap"] for r in h["rows"]] == [1, 8] and all(r["on_output_tok_s"] for r in h["rows"])
    assert "DSA sizing (bfloat16 KV, 78 anchor + 0 shared-index layers)" in (out / "report.md").read_text()
