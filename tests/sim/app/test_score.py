"""``hicache-sim score``: a measured file of another setup is refused before any run; a per-request export is
replayed request for request; the table sets each measured figure beside the simulated one over seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sim.app.cli import main
from sim.app.score import check_against, replay_trace
from sim.app.scoretable import format_score, request_for_request, score_rows
from sim.base.errors import InputError
from sim.interop.measured import MeasuredRequest, read_measured
from sim.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[3]
M1DATA = Path(__file__).resolve().parents[3] / "scenarios" / "validation" / "measured"
DATA = ROOT / "tests" / "data" / "measured"
M1A = ROOT / "scenarios" / "validation" / "m1a_off.yaml"


def test_a_run_of_another_model_is_refused_naming_the_field():
    runs = read_measured([str(M1DATA / "inferencex_2718_c128.json")])
    with pytest.raises(InputError, match=r"inferencex_2718_c128.json: model: 'deepseek-ai/DeepSeek-V4-Pro', but the "
                                         r"scenario runs DeepSeek-V4-Flash"):
        check_against(runs, load_scenario(M1A))


def test_a_step_at_another_concurrency_is_refused_naming_its_line(tmp_path):
    lines = (M1DATA / "m1a_off_bench_serving.jsonl").read_text().splitlines()
    run = json.loads(lines[1])
    run["max_concurrency"] = 12
    (tmp_path / "b.jsonl").write_text("\n".join([lines[0], json.dumps(run)]) + "\n")
    with pytest.raises(InputError, match=r"b\.jsonl:2: max_concurrency: 12, but the scenario runs "
                                         r"workload\.steps\[1\]\.max_concurrency = 8"):
        check_against(read_measured([str(tmp_path / "b.jsonl")]), load_scenario(M1A))
    (tmp_path / "c.jsonl").write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(InputError, match=r"c\.jsonl:5: max_concurrency: run 5 of the file, but the scenario has 4"):
        check_against(read_measured([str(tmp_path / "c.jsonl")]), load_scenario(M1A))


def test_the_refusal_is_exit_2_before_any_output(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["score", str(M1DATA / "inferencex_2718_c160.json"), "--scenario", str(M1A), "--out", str(out),
                 "--no-progress"])
    assert code == 2 and not out.exists()
    assert capsys.readouterr().err.count("\n") == 1


def test_a_conversation_shares_its_prefix_across_turns_in_the_replayed_trace(tmp_path):
    reqs = [MeasuredRequest(0.0, 300, 10, conversation="a", turn=0), MeasuredRequest(0.5, 200, 10),
            MeasuredRequest(2.0, 700, 10, conversation="a", turn=1)]
    replay_trace(reqs, tmp_path / "t.jsonl", block=64)
    a0, alone, a1 = (json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines())
    assert a1["hash_ids"][: len(a0["hash_ids"])] == a0["hash_ids"] and len(a1["hash_ids"]) == 11
    assert not set(alone["hash_ids"]) & set(a1["hash_ids"]) and a1["timestamp"] == 2000.0


def test_score_rows_use_relative_error_for_times_and_points_for_hit_rates():
    (run,) = read_measured([str(DATA / "metrics_before.txt"), str(DATA / "metrics_after.txt")])
    per_seed = pd.DataFrame({"seed": [1, 2, 3], "ttft_mean_s": [0.5, 0.6, 0.7], "hit_device": [0.4, 0.4, 0.4],
                             "queue_mean": [2.0, 3.0, 4.0]})
    rows = {r.figure: r for r in score_rows([run], per_seed)}
    assert rows["queue_mean"].measured is None and rows["queue_mean"].mean == 3.0  # a driver the run did not report
    assert rows["ttft_mean_s"].error == pytest.approx(0.6 / 0.4 - 1) and rows["ttft_mean_s"].lo < 0.6
    assert rows["hit_device"].error == pytest.approx(-10.0) and rows["hit_device"].driver
    assert rows["queue_now"].mean is None  # measured only: shown, not scored
    table = format_score(list(rows.values()))
    assert "+50.0%" in table and "-10.0 pt" in table and "inputs that drive the misses:" in table


def test_score_replays_an_aiperf_export_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "score"
    code = main(["score", str(DATA / "aiperf_profile_export.jsonl"), "--scenario",
                 str(ROOT / "scenarios" / "quickstart.yaml"), "--seeds", "2", "--workers", "1", "--out", str(out),
                 "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0 and "replaying 6 requests" in printed and "request for request (6 requests, 12 pairs" in printed
    rows = json.loads((out / "score.json").read_text())["rows"]
    by = {r["figure"]: r for r in rows}
    assert by["isl_mean"]["mean"] == pytest.approx(1088.0)  # the run's own sizes, replayed
    assert by["ttft_mean_s"]["measured"] == pytest.approx(0.16) and by["ttft_mean_s"]["mean"] > 0
    assert (out / "score.png").stat().st_size > 0 and (out / "score.csv").exists()


def test_a_score_folder_is_replaced_only_with_overwrite(tmp_path, capsys):
    argv = ["score", str(DATA / "aiperf_profile_export.jsonl"), "--scenario", str(ROOT / "scenarios" / "quickstart.yaml"),
            "--seeds", "1", "--out", str(tmp_path / "s"), "--no-progress"]
    assert main(argv) == 0
    assert main(argv) == 2 and "pass --overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0


def test_request_for_request_pairs_each_replayed_request_with_its_measurement():
    measured = [1.0, 2.0, None, 4.0]  # the third request has no measured TTFT: left out
    rr = request_for_request(measured, [[1.0, 3.0, 9.0, 4.0], [1.2, 2.0, 9.0, float("nan")]])
    assert rr["pairs"] == 5 and rr["median"] == 1.0 and rr["within_25pct"] == 0.8


def test_rounds_the_scenario_does_not_run_are_refused():
    runs = read_measured([str(DATA / "m3_h800_l1l2_bench_multiturn.jsonl")])
    with pytest.raises(InputError, match=r"round\.round_3: round_3, but the scenario runs 3 rounds"):
        check_against(runs, load_scenario(ROOT / "scenarios" / "quickstart.yaml"))
    with pytest.raises(InputError, match="a bench_multiturn round, but the scenario's workload is bench_serving"):
        check_against(runs, load_scenario(M1A))


def test_an_agentx_result_is_scored_on_a_lane_replay_with_its_drivers(tmp_path, capsys):
    lanes = ROOT / "scenarios" / "dsv4_flash_agentic_lanes.yaml"  # 8 lanes of V4-Flash
    doc = json.loads((M1DATA / "inferencex_2718_c128.json").read_text())
    doc.update(conc=9, model="deepseek-ai/DeepSeek-V4-Flash")
    (tmp_path / "ix.json").write_text(json.dumps(doc))
    argv = ["score", str(tmp_path / "ix.json"), "--scenario", str(lanes), "--seeds", "1", "--out", str(tmp_path / "s"),
            "--no-progress"]
    assert main(argv) == 2 and "conc: 9, but the scenario runs workload.lanes = 8" in capsys.readouterr().err
    doc["conc"] = 8
    (tmp_path / "ix.json").write_text(json.dumps(doc))
    assert main(argv) == 0
    by = {r["figure"]: r for r in json.loads((tmp_path / "s" / "score.json").read_text())["rows"]}
    assert by["tok_per_s_per_gpu"]["mean"] > 0 and by["tok_per_s_per_user"]["error"] is not None
    assert by["calls_per_lane_hour"]["measured"] is None and by["calls_per_lane_hour"]["mean"] > 0
