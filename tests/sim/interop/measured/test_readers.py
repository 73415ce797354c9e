"""Each reader turns its tool's export into the simulator's figure names, and refuses a cut-short or foreign file
in one line naming the file and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sim.base.errors import InputError
from sim.interop.measured import read_measured

M1DATA = Path(__file__).resolve().parents[4] / "scenarios" / "validation" / "measured"
DATA = Path(__file__).resolve().parents[3] / "data" / "measured"


def _at(name: str) -> Path:
    """Fixtures live in tests/data/measured; the published M1 runs beside their scenarios."""
    return DATA / name if (DATA / name).exists() else M1DATA / name


def _one(name: str):
    (run,) = read_measured([str(_at(name))])
    return run


def test_aiperf_per_request_export_leaves_out_warmup_and_failed_requests_and_keeps_conversations():
    run = _one("aiperf_profile_export.jsonl")
    assert run.tool == "aiperf" and len(run.requests) == 6  # 8 lines: one warm-up, one failed
    assert run.requests[0].start_s == 0.0 and {r.conversation for r in run.requests} == {"conv-a", "conv-b"}
    assert [r.turn for r in run.requests if r.conversation == "conv-a"] == [0, 1, 2]
    assert run.figures["isl_mean"] == pytest.approx(sum(r.input_tokens for r in run.requests) / 6)
    assert run.figures["ttft_mean_s"] == pytest.approx(0.160)  # ms -> s, by the unit each record carries
    assert run.figures["tpot_mean_s"] == pytest.approx(0.0195)


def test_aiperf_aggregates_json_and_csv_agree_and_the_json_states_model_and_concurrency():
    js, cs = _one("profile_export_aiperf.json"), _one("profile_export_aiperf.csv")
    for name in ("ttft_mean_s", "ttft_p90_s", "tpot_mean_s", "isl_mean", "output_tokens_per_s", "requests_per_s",
                 "input_tokens_per_s"):
        assert js.figures[name] == pytest.approx(cs.figures[name]), name
    assert js.model[0] == "deepseek-ai/DeepSeek-V4-Flash" and js.concurrency[""][0] == 16


def test_bench_serving_lines_are_steps_with_their_concurrency():
    run = _one("m1a_off_bench_serving.jsonl")
    assert [run.concurrency[f"step{i}"][0] for i in range(4)] == [1, 8, 16, 32]
    assert run.figures["step3.ttft_mean_s"] == pytest.approx(4.493) and run.figures["step0.tpot_mean_s"] == 0.0064
    assert run.figures["step1.total_tokens_per_s"] == 2907


def test_bench_multiturn_rounds_and_inferencex_aggregates():
    rounds = _one("m3_h800_l1l2_bench_multiturn.jsonl")
    assert rounds.figures["round2.hit_total"] == pytest.approx(0.657) and rounds.figures["round9.ttft_mean_s"] == 4.15
    ix = _one("inferencex_2718_c160.json")
    assert ix.figures == {"tok_per_s_per_gpu": 50468.23, "tok_per_s_per_user": 28.916} and ix.concurrency[""][0] == 160


def test_an_inferencex_request_rate_is_each_lanes_calls_per_hour(tmp_path):
    doc = json.loads((M1DATA / "inferencex_2718_c128.json").read_text())
    doc["request_metrics"]["qps"] = {"mean": 3.2}
    (tmp_path / "ix.json").write_text(json.dumps(doc))
    (run,) = read_measured([str(tmp_path / "ix.json")])
    assert run.figures["calls_per_lane_hour"] == pytest.approx(3.2 * 3600 / 128)


def test_two_prometheus_snapshots_give_the_window_between_them():
    (run,) = read_measured([str(DATA / "metrics_before.txt"), str(DATA / "metrics_after.txt")])
    # 40,000 prompt tokens in the window, 20,000 found on the GPU and 8,000 in host memory
    assert run.figures["hit_device"] == pytest.approx(0.5) and run.figures["hit_host"] == pytest.approx(0.2)
    assert run.figures["ttft_mean_s"] == pytest.approx(80.0 / 200)
    assert run.figures["token_usage"] == pytest.approx(0.61)  # a per-rank fraction: the mean of the ranks
    with pytest.raises(InputError, match="metrics_before.txt.*sglang:prompt_tokens_total: smaller"):
        read_measured([str(DATA / "metrics_after.txt"), str(DATA / "metrics_before.txt")])


def _cut(tmp_path: Path, name: str, keep: float) -> str:
    text = _at(name).read_text()
    out = tmp_path / name
    out.write_text(text[: int(len(text) * keep)])
    return str(out)


@pytest.mark.parametrize("name", ["aiperf_profile_export.jsonl", "m1a_off_bench_serving.jsonl",
                                  "profile_export_aiperf.json", "metrics_after.txt"])
def test_a_cut_short_export_is_one_line_naming_the_file(tmp_path, name):
    with pytest.raises(InputError) as err:
        read_measured([_cut(tmp_path, name, 0.55)])
    assert str(err.value).startswith(str(tmp_path / name)) and "\n" not in str(err.value)


def test_a_field_of_the_wrong_kind_names_its_line_and_field(tmp_path):
    lines = (M1DATA / "m1a_off_bench_serving.jsonl").read_text().splitlines()
    run = json.loads(lines[2])
    run["mean_tpot_ms"] = "fast"
    lines[2] = json.dumps(run)
    bad = tmp_path / "b.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"b\.jsonl:3: mean_tpot_ms: expected a non-negative number"):
        read_measured([str(bad)])


def test_an_incomplete_aiperf_run_and_a_foreign_json_are_refused(tmp_path):
    doc = json.loads((DATA / "profile_export_aiperf.json").read_text())
    doc.update(is_complete=False, incomplete_reason="record-stall watchdog")
    (tmp_path / "a.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="a.json: is_complete: false.*watchdog"):
        read_measured([str(tmp_path / "a.json")])
    (tmp_path / "x.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="x.json: a JSON file of no format"):
        read_measured([str(tmp_path / "x.json")])
    shutil.copy(DATA / "metrics_after.txt", tmp_path / "m3.txt")
    with pytest.raises(InputError, match="3 Prometheus snapshots"):
        read_measured([str(DATA / "metrics_before.txt"), str(DATA / "metrics_after.txt"), str(tmp_path / "m3.txt")])
