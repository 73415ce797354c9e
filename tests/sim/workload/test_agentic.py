"""Generated agentic sessions: valid Weka trajectories whose contexts grow, fan out and end as asked."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.app.run import lane_trajectories, run_scenario
from sim.base.errors import InputError
from sim.scenario.load import scenario_from_dict
from sim.scenario.schema import AgenticWorkload
from sim.workload.agentic import generate_sessions, generated_trajectories
from sim.workload.trajectory import Subagent, weka_trajectory

ROOT = Path(__file__).resolve().parents[3]
SMALL = dict(sessions=6, turns_per_session=8, system_tokens=1024, first_turn_tokens=1024, context_growth_tokens=800,
             output_tokens=100, think_time_s=2.0, subagent_probability=0.4, max_context=30_000)  # fmt: skip


def sessions(seed=1, **over):
    w = AgenticWorkload(**{**SMALL, **over})
    return w, [weka_trajectory(r, 256, "gen", None) for r in generate_sessions(w, np.random.default_rng(seed), w.sessions)]


def test_each_call_repeats_the_previous_call_and_its_output_then_grows():
    _, trajs = sessions()
    for tr in trajs:
        main = [c for _, c in tr.main]
        for a, b in zip(main, main[1:]):
            assert b.input_len > a.input_len + a.output_len
            shared = a.input_len // 256  # whole pages of the previous input come back
            assert b.pages[:shared] == a.pages[:shared]
        assert all(c.input_len <= 30_000 for c in tr.calls())


def test_subagents_share_only_the_system_prefix_and_the_parent_joins_them():
    _, trajs = sessions(subagent_probability=1.0)
    groups = [(tr, i, s) for tr in trajs for i, s in enumerate(tr.steps) if isinstance(s, Subagent)]
    assert groups
    for tr, i, g in groups:
        parent = next(c for _, c in tr.main)
        assert g.calls[0].pages[: 1024 // 256] == parent.pages[: 1024 // 256]
        assert g.calls[0].pages[4] != parent.pages[4]
        later = [s for s in tr.steps[i + 1 :] if not isinstance(s, Subagent)]
        if later:
            assert i in later[0].joins


def test_the_same_seed_gives_the_same_sessions_and_longer_growth_longer_contexts():
    w = AgenticWorkload(**SMALL)
    assert list(generate_sessions(w, np.random.default_rng(4), 6)) == list(generate_sessions(w, np.random.default_rng(4), 6))
    _, base = sessions(max_context=10**6)
    _, grown = sessions(max_context=10**6, context_growth_tokens=1600)
    mean = lambda ts: np.mean([c.input_len for t in ts for c in t.calls()])  # noqa: E731
    assert mean(grown) > 1.3 * mean(base)


def test_an_agentic_workload_runs_in_lanes():
    sc = scenario_from_dict({"name": "gen", "model": {"name": "generic", "generic_bytes_per_token": 1000},
                             "hardware": {"kv_mem_gb": 0.1},
                             "workload": {"kind": "agentic", **SMALL, "lanes": 3, "benchmark_duration_s": 60}},
                            source="test")  # fmt: skip
    report = run_scenario(sc).summary["client"]
    assert report["lanes"] == 3 and report["requests"] > 10 and report["prefix_hit"] > 0.5


def test_system_prompt_and_first_turn_must_fit_the_context():
    with pytest.raises(ValueError, match="first_turn_tokens: system_tokens"):
        AgenticWorkload(system_tokens=5000, first_turn_tokens=5000, max_context=8000)


def test_the_bundled_fixtures_are_what_the_tool_generates(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import make_agentic_fixtures as tool
    finally:
        sys.path.pop(0)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    tool.main()
    for name in ("weka_synthetic.jsonl", "bailian_synthetic.jsonl"):
        assert (tmp_path / "data" / "agentic" / name).read_bytes() == (ROOT / "data" / "agentic" / name).read_bytes()
    first = json.loads((ROOT / "data" / "agentic" / "bailian_synthetic.jsonl").read_text().splitlines()[0])
    assert first["parent_chat_id"] == -1 and len(first["hash_ids"]) == -(-first["input_length"] // 16)


def test_the_cli_reports_an_agentic_run_whose_records_were_streamed(tmp_path, capsys):
    from sim.app.cli import main

    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nmodel: {name: generic, generic_bytes_per_token: 1000}\nhardware: {kv_mem_gb: 0.1}\n"
                        "workload: {kind: agentic, sessions: 4, turns_per_session: 6, max_context: 30000, lanes: 2, "
                        "benchmark_duration_s: 60}\n")  # fmt: skip
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert "aiperf agentic, 2 lanes:" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["client"]["requests"] > 0


def test_generated_sessions_are_refused_as_they_pass_the_bound_not_after(monkeypatch):
    """Sessions are made before the run: sessions past the calls a generated replay may hold, or a session
    written out with more block ids than the writer allows, cost one line within seconds, naming the field."""
    monkeypatch.setattr("sim.workload.agentic.MAX_WRITTEN_BLOCK_IDS", 1_000)
    w = AgenticWorkload(**{**SMALL, "sessions": 1, "turns_per_session": 10_000, "context_growth_tokens": 1e-6,
                           "output_tokens": 1e-6, "max_context": 4_000_000})  # fmt: skip
    with pytest.raises(InputError, match="^workload: a generated session's calls pass 1,000 block ids"):
        list(generate_sessions(w, np.random.default_rng(1), 1))
    monkeypatch.setattr("sim.workload.agentic.MAX_GENERATED_CALLS", 50)
    sc = scenario_from_dict({"name": "a", "workload": {"kind": "agentic", **SMALL, "sessions": 100_000}})
    with pytest.raises(InputError, match=r"^workload.sessions: the generated sessions pass 50 calls"):
        lane_trajectories(sc.workload, 256, np.random.default_rng(1))


@pytest.mark.parametrize("page", [256, 64, 16])
def test_page_key_runs_share_exactly_what_the_written_block_ids_share(page):
    """The runs the lanes replay (made without block ids) and the written sessions' interned block ids give
    the same pages the same keys: equal up to renaming, call by call."""
    w = AgenticWorkload(**{**SMALL, "subagent_probability": 0.5})
    written = [weka_trajectory(r, page, "gen", None) for r in generate_sessions(w, np.random.default_rng(2), 6)]
    runs = generated_trajectories(w, np.random.default_rng(2), 6, page)

    def renamed(tr):
        names: dict[int, int] = {}
        return [[names.setdefault(k, len(names)) for k in c.pages] for c in tr.calls()]

    assert [renamed(t) for t in runs] == [renamed(t) for t in written]
    if page >= 64:  # whole blocks a page: a call's keys are its chain's so far, and one run more
        assert sum(len(c.pages.runs) for t in runs for c in t.calls()) <= 3 * sum(1 for t in runs for c in t.calls())


def test_corpus_sized_sessions_are_made_in_seconds_holding_a_few_runs_a_call():
    """393 sessions at the defaults (contexts to 990K tokens, the corpus builder's cap): ~57K parent calls,
    about half past 256K tokens as in SemiAnalysis's 062126 corpus, held as runs, not keys."""
    w = AgenticWorkload(sessions=393)
    trajs = generated_trajectories(w, np.random.default_rng(1), 393, 256)
    parents = [c for t in trajs for _, c in t.main]
    assert 40_000 < len(parents) < 75_000
    assert 0.35 < np.mean([c.input_len > 256_000 for c in parents]) < 0.65
    assert max(c.input_len for c in parents) > 900_000
    assert max(len(c.pages.runs) for t in trajs for c in t.calls()) <= 64
