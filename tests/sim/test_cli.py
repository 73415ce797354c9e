"""The ``hicache-sim run`` and ``validate`` commands, as a user meets them."""

from pathlib import Path

import pytest

from sim.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_run_writes_the_four_outputs_and_prints_the_summary(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "scenario.yaml", "summary.json",
                                                      "timeseries.parquet"]  # fmt: skip
    printed = capsys.readouterr().out
    assert "TTFT" in printed and "input throughput" in printed
    assert "spec-derived" in printed  # which cost table, and where it came from


def test_the_resolved_scenario_runs_again_to_the_same_summary(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(first), "--no-progress"])
    main(["run", str(first / "scenario.yaml"), "--out", str(second), "--no-progress"])
    assert (first / "summary.json").read_bytes() == (second / "summary.json").read_bytes()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hicache.load_back_threshold=-1", "hicache.load_back_threshold"),
        ("hicache.prefech_threshold=1", "hicache.prefech_threshold"),
        ("hardware.kv_mem_gb=500", "hardware.kv_mem_gb"),
        ("workload.num_clients=abc", "workload.num_clients"),
    ],
)
def test_a_bad_scenario_exits_2_naming_the_field_and_writes_nothing(tmp_path, capsys, override, message):
    out = tmp_path / "out"
    code = main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(out), "--set", override, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_validate_reports_a_malformed_file_with_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhicache: [unclosed\n")
    assert main(["validate", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_validate_accepts_every_shipped_scenario(capsys):
    for path in sorted(SCENARIOS.glob("*.yaml")):
        assert main(["validate", str(path)]) == 0, path
