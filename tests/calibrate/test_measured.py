"""``calibrate compute --from``: the points a measured run's figures carry, and the fit written with its
provenance; a run of another model is refused as ``score`` refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibrate.measured import points_from_measured
from sim.app.cli import main
from sim.interop.measured import read_measured

ROOT = Path(__file__).resolve().parents[2]
M1DATA = Path(__file__).resolve().parents[2] / "scenarios" / "validation" / "measured"
DATA = ROOT / "tests" / "data" / "measured"
M1A = str(ROOT / "scenarios" / "validation" / "m1a_off.yaml")


def test_concurrency_1_gives_a_prefill_and_a_decode_point_higher_concurrency_a_decode_point_only():
    points = points_from_measured(read_measured([str(M1DATA / "m1a_off_bench_serving.jsonl")]))
    assert [(p.kind, p.batch) for p in points] == [("decode", 1), ("prefill", 1), ("decode", 8), ("decode", 16),
                                                   ("decode", 32)]
    prefill = points[1]
    assert (prefill.tokens, prefill.context, prefill.seconds) == (3500, 0, pytest.approx(0.832))
    assert points[2].context == 8 * (3500 + 750) and points[2].seconds == pytest.approx(0.008)


def test_a_fit_from_one_run_writes_its_provenance_and_pins_what_one_batch_cannot_part(tmp_path, capsys):
    out = tmp_path / "fit.json"
    code = main(["calibrate", "compute", "--from", str(M1DATA / "m1a_off_c1_bench_serving.jsonl"), "--scenario", M1A,
                 "--set", "hardware.cost_table=null", "--out", str(out)])
    assert code == 0 and "step_overhead_ms pinned" in capsys.readouterr().err
    compute = json.loads(out.read_text())["compute"]
    src = compute["source"]
    assert src["runs"][0]["tool"] == "bench_serving" and len(src["runs"][0]["sha256"]) == 16
    assert src["device"] == "H20" and src["date"] and src["hicache_sim"]
    assert "step_overhead_ms" in src["fixed"] and 0 < compute["mfu"] <= 1 and 0 < compute["mbu"] <= 1


def test_a_run_of_another_model_is_refused(tmp_path, capsys):
    code = main(["calibrate", "compute", "--from", str(M1DATA / "inferencex_2718_c128.json"), "--scenario", M1A,
                 "--out", str(tmp_path / "fit.json")])
    assert code == 2 and "model: 'deepseek-ai/DeepSeek-V4-Pro'" in capsys.readouterr().err
    assert not (tmp_path / "fit.json").exists()


def test_check_compares_a_new_fit_with_a_baseline_fit_parameter_by_parameter(tmp_path, capsys):
    out = tmp_path / "fit.json"
    assert main(["calibrate", "compute", "--from", str(M1DATA / "m1a_off_c1_bench_serving.jsonl"), "--scenario", M1A,
                 "--set", "hardware.cost_table=null", "--out", str(out)]) == 0
    new = json.loads(out.read_text())["compute"]
    base = str(ROOT / "calibrations" / "h20_dsv4_flash.json")
    capsys.readouterr()
    code = main(["calibrate", "check", str(out), "--baseline", base, "--tolerance", "10%"])
    printed = capsys.readouterr().out
    old = json.loads(Path(base).read_text())["compute"]
    # a lower mbu or mfu is a slower step: a regression; the copy entries are the same spec on both sides
    assert code == 1 and "compute mbu" in printed and f"{new['mbu'] / old['mbu'] - 1:+.1%}" in printed
    assert main(["calibrate", "check", str(out), "--baseline", str(out)]) == 0


def test_a_per_request_export_takes_the_scenarios_concurrency(tmp_path, capsys):
    """aiperf's profile_export.jsonl states no concurrency: quickstart's --max-parallel (16) stands for it."""
    quick = str(ROOT / "scenarios" / "quickstart.yaml")
    code = main(["calibrate", "compute", "--from", str(DATA / "aiperf_profile_export.jsonl"), "--scenario", quick,
                 "--out", str(tmp_path / "fit.json")])
    printed = capsys.readouterr().out
    assert code == 0 and " decode " in printed and "run c16 ITL" in printed
