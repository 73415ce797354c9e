"""aiperf's agentic session synthesizer as a source of lane sessions (``synthesizer: aiperf``), where aiperf is
installed; without it, one line naming the field."""

import sys

import numpy as np
import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.workload.trajectory import end_to_start


def test_without_aiperf_the_run_stops_with_one_line_before_it_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "aiperf", None)  # import aiperf fails, installed or not
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\nmodel: {name: generic, generic_bytes_per_token: 1000}\nhardware: {kv_mem_gb: 0.1}\n"
                        "workload: {kind: agentic, synthesizer: aiperf, sessions: 4, lanes: 2}\n")  # fmt: skip
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hicache-sim: error: {scenario}: workload.synthesizer: aiperf is not installed (pip install "
                   "aiperf): its agentic session synthesizer makes these sessions"]  # fmt: skip
    assert not (tmp_path / "out").exists()


class TestWithAiperf:
    @pytest.fixture(autouse=True)
    def _aiperf(self):
        pytest.importorskip("aiperf.dataset.agentic_code_gen.session_synthesizer")

    def test_sessions_are_the_synthesizers_own_draws(self):
        from aiperf.dataset.agentic_code_gen.config import load_config
        from aiperf.dataset.agentic_code_gen.session_synthesizer import SessionSynthesizer

        from sim.workload.aiperf_synth import aiperf_trajectories

        trajs = aiperf_trajectories("default", 20, 5, 256)
        theirs = SessionSynthesizer(load_config("default"), seed=5).synthesize_sessions(20)
        assert [t.id for t in trajs] == [s.session_id for s in theirs]
        for traj, sess in zip(trajs, theirs, strict=True):
            calls = [c for _, c in traj.main]
            assert [(c.input_len, c.output_len) for c in calls] == [(t.input_length, t.output_length) for t in sess.turns]
            gaps = [end_to_start(a, b.t) for a, b in zip(calls, calls[1:])]
            assert gaps == pytest.approx([t.delay_ms / 1000 for t in sess.turns[1:]])
            for a, b in zip(calls, calls[1:]):  # a call's whole pages come back in the next
                keep = a.input_len // 512 * 2
                assert list(b.pages)[:keep] == list(a.pages)[:keep]

    def test_a_bundled_datasets_manifest_and_a_bad_name(self):
        from sim.workload.aiperf_synth import aiperf_trajectories

        trajs = aiperf_trajectories("1k_sessions_200k_ctx", 30, 1, 256)
        outs = np.array([c.output_len for t in trajs for c in t.calls()])
        assert 700 < outs.mean() < 1300 and all(c.input_len < 200_000 for t in trajs for c in t.calls())
        with pytest.raises(InputError, match="^workload.aiperf_config: nope: Config 'nope' not found"):
            aiperf_trajectories("nope", 1, 1, 256)
