"""Every run kind's progress off a terminal (a log, CI, a pipe) gives a total and the time left, as
docs/usage.md promises: a lane replay, whose request count only the run decides, counts simulated seconds
against the run's end; a decode instance counts its requests."""

import re
from pathlib import Path

import pytest

import sim.base.progress as progress
from sim.app.cli import main

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
LINE = re.compile(r"^(?P<desc>.+?): (?P<n>[\d,]+)/(?P<total>[\d,]+) (?P<unit>[a-z ]+) \((?P<pct>\d+)%\), "
                  r"\d+ s elapsed, about \d+ s left$")  # fmt: skip

AGENTIC = """name: agentic_tiny
model: deepseek-v4-flash
hardware: {kv_mem_gb: 1.0}
workload: {kind: agentic, sessions: 4, lanes: 2, turns_per_session: 6, benchmark_duration_s: 40}
"""

KINDS = {
    "synthetic": ["run", "{tmp}/synthetic.yaml"],
    "multi_turn": ["run", str(SCENARIOS / "quickstart.yaml"), "--set", "workload.num_clients=8"],
    "trace": ["run", str(SCENARIOS / "mooncake_conversation.yaml"), "--set", "workload.max_requests=40",
              "--set", "cluster.instances=1"],
    "lanes": ["run", str(SCENARIOS / "dsv4_flash_agentic_lanes.yaml"), "--set", "workload.lanes=2",
              "--set", "workload.benchmark_duration_s=40"],
    "agentic": ["run", "{tmp}/agentic.yaml"],
    "decode (HiSparse)": ["run", str(SCENARIOS / "hisparse_quick.yaml")],
    "seeds": ["run", str(SCENARIOS / "quickstart.yaml"), "--set", "workload.num_clients=4", "--seeds", "2",
              "--workers", "1"],
    "sweep": ["sweep", str(SCENARIOS / "quickstart.yaml"), "--set", "workload.num_clients=4",
              "--grid", "hicache.enabled=true,false", "--workers", "1"],
}  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_off_a_terminal_every_run_kind_prints_a_total_and_the_time_left(kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # a line at every update instead of every 30 s
    (tmp_path / "synthetic.yaml").write_text(
        "name: synthetic_tiny\nworkload: {kind: synthetic, num_requests: 30, rate: 5, input_length: 512}\n")
    (tmp_path / "agentic.yaml").write_text(AGENTIC)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in KINDS[kind]]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [m for m in map(LINE.match, err.splitlines()) if m]
    assert lines, f"no line with a total and the time left:\n{err[-2000:]}"
    totals = [int(m["total"].replace(",", "")) for m in lines]
    assert all(t > 0 for t in totals)
    assert all(int(m["n"].replace(",", "")) <= int(m["total"].replace(",", "")) for m in lines)


@pytest.mark.parametrize("kind", ["lanes", "agentic"])
def test_a_lane_replay_counts_simulated_seconds_to_an_end_past_the_measured_phase(kind, tmp_path, capsys,
                                                                                   monkeypatch):  # fmt: skip
    """Its total is at least the measured phase (40 s) plus aiperf's 30 s grace, and its last line is where the
    run ended, at 100%."""
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    (tmp_path / "agentic.yaml").write_text(AGENTIC)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in KINDS[kind]]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().err.splitlines()
    ticks = [m for m in map(LINE.match, lines) if m]
    assert {m["unit"] for m in ticks} == {"simulated s"}
    assert all(int(m["total"].replace(",", "")) >= 70 for m in ticks[:-1])
    assert re.match(r"^[\w.-]+: ([\d,]+)/\1 simulated s \(100%\), \d+ s elapsed$", lines[-1]), lines[-1]
