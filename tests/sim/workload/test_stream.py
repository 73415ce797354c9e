"""Workloads stream: a request is made when it is reached, a trace read as it is replayed, and a survey sizes
the run without holding the workload."""

import json
import os
import tracemalloc

import numpy as np
import pytest

from sim.base.errors import InputError
from sim.workload.stream import CHUNK, Concat, survey
from sim.workload.synthetic import multi_turn_requests, random_ids_requests, shared_prefix
from sim.workload.traces import iter_mooncake, trace_requests


def lengths_cost(n_in: np.ndarray, n_out: np.ndarray) -> float:
    return float(np.sum(n_in * 1e-3 + n_out))


def mooncake_lines(path, n, bad_at=None):
    lines = [json.dumps({"timestamp": i, "input_length": 600, "output_length": 5, "hash_ids": [i, i + 1]})
             for i in range(n)]  # fmt: skip
    if bad_at is not None:
        lines[bad_at] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    return path


class TestSynthetic:
    def test_ten_million_requests_yield_the_first_at_once_holding_only_their_drawn_figures(self):
        n = 10_000_000
        tracemalloc.start()
        try:
            reqs = shared_prefix(n, 4, 512, 2048, 64, 256, np.broadcast_to(0.0, n), np.random.default_rng(0))
            first = next(iter(reqs))
            held = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(reqs) == n and first.rid == 0 and len(first.keys) == 8
        assert held < 100 * n  # the groups drawn (8 B a request); the requests' keys alone would be ~800 B each
        assert reqs[n - 1].rid == n - 1 and reqs[n - 1].keys[-1] == ("r", n - 1, 7)

    def test_a_request_is_made_again_equal_each_time_it_is_asked_for(self):
        reqs = shared_prefix(50, 3, 256, 1024, 8, 128, np.arange(50.0), np.random.default_rng(1))
        assert list(reqs) == list(reqs) and reqs[7] == list(reqs)[7]
        with pytest.raises(IndexError):
            reqs[50]

    def test_multi_turn_rounds_carry_the_history_as_the_client_sends_them(self):
        convos = multi_turn_requests(3, 3, 300, 100, page_size=64, system_prompt_length=128,
                                     range_ratio=0.5, rng=np.random.default_rng(2))  # fmt: skip
        for c in range(3):
            history = 128
            for r in range(3):
                req = convos.request(c, r)
                assert req.rid == 3 * c + r and convos[req.rid] == req
                assert req.input_len > history and req.keys[:2] == [("sys", 0), ("sys", 1)]
                history = req.input_len + req.output_len

    def test_an_indexed_survey_reads_the_lengths_and_agrees_with_one_over_the_requests(self):
        convos = multi_turn_requests(20, 4, 500, 60, page_size=64, range_ratio=0.3, rng=np.random.default_rng(3))
        steps = Concat([random_ids_requests(30, 900, 40, 0.2, seed=s, page_size=64, first_rid=30 * s)
                        for s in range(3)])  # fmt: skip
        for workload in (convos, steps):
            fast, slow = workload.survey(lengths_cost), survey(iter(workload), lengths_cost)
            assert fast == slow and fast.requests == len(workload)
            assert (fast.smallest.input_len, fast.smallest.output_len) == min(
                (r.input_len, r.output_len) for r in workload)  # fmt: skip

    def test_a_survey_prices_in_chunks_holding_no_more_than_one(self):
        n = CHUNK + 5
        reqs = shared_prefix(n, 1, 0, 256, 2, 256, np.broadcast_to(1.0, n), np.random.default_rng(4))
        assert reqs.survey(lengths_cost).cost == pytest.approx(n * (0.256 + 2))


class TestTraces:
    def test_a_trace_is_read_as_it_is_replayed(self, tmp_path):
        path = mooncake_lines(tmp_path / "t.jsonl", 5, bad_at=3)
        reqs = iter_mooncake(path)
        assert [next(reqs).rid for _ in range(3)] == [0, 1, 2]  # read before the bad line is reached
        with pytest.raises(InputError, match=r"t\.jsonl:4: malformed JSON"):
            next(reqs)

    def test_a_stream_knows_its_size_after_its_survey_and_replays_the_same_requests(self, tmp_path):
        stream = trace_requests(mooncake_lines(tmp_path / "t.jsonl", 6), page_size=256)
        with pytest.raises(TypeError):
            len(stream)
        seen = stream.survey(lengths_cost)
        assert (len(stream), seen.last_arrival_s, seen.smallest.rid) == (6, 0.005, 0)
        assert list(stream) == list(stream) and len(list(stream)) == 6

    def test_a_survey_names_the_requests_with_the_most_tokens_and_the_longest_prompt(self, tmp_path):
        path = tmp_path / "t.jsonl"
        rows = [(600, 5), (700, 900), (1200, 10), (1200, 3)]
        path.write_text("".join(json.dumps({"timestamp": i, "input_length": a, "output_length": b,
                                            "hash_ids": [i, i + 1, i + 2]}) + "\n" for i, (a, b) in enumerate(rows)))  # fmt: skip
        assert trace_requests(path, page_size=256).survey(lengths_cost).largest == ((700, 900), (1200, 10))
        steps = random_ids_requests(50, 300, 40, 0.5, 7, 64)  # an indexed workload reads its lengths instead
        assert steps.survey(lengths_cost).largest == survey(iter(steps), lengths_cost).largest

    def test_a_survey_checks_every_record_before_the_run(self, tmp_path):
        stream = trace_requests(mooncake_lines(tmp_path / "t.jsonl", 6, bad_at=5), page_size=256)
        with pytest.raises(InputError, match=r"t\.jsonl:6: malformed JSON"):
            stream.survey(lengths_cost)

    def test_off_a_terminal_the_survey_of_a_trace_prints_its_progress_with_the_total(self, tmp_path, capsys,
                                                                                    monkeypatch):  # fmt: skip
        """A whole trace takes minutes to read through before a run (or a plan) starts: the promised line comes."""
        monkeypatch.setattr("sim.base.progress.PLAIN_EVERY_S", 0.0)  # a line at every request, not every 30 s
        trace_requests(mooncake_lines(tmp_path / "t.jsonl", 4), page_size=256).survey(lengths_cost, progress=True)
        lines = capsys.readouterr().err.splitlines()
        assert lines[0].startswith("reading t.jsonl: 1/4 requests (25%), ") and "left" in lines[0]
        assert lines[-1].startswith("reading t.jsonl: 4/4 requests (100%), ") and "\r" not in "".join(lines)
        capped = trace_requests(tmp_path / "t.jsonl", page_size=256, max_requests=2)
        capped.survey(lengths_cost, progress=True)
        assert capsys.readouterr().err.splitlines()[-1].startswith("reading t.jsonl: 2/2 requests (100%)")

    def test_a_survey_without_progress_prints_nothing(self, tmp_path, capsys, monkeypatch):
        monkeypatch.setattr("sim.base.progress.PLAIN_EVERY_S", 0.0)
        trace_requests(mooncake_lines(tmp_path / "t.jsonl", 4), page_size=256).survey(lengths_cost)
        assert capsys.readouterr().err == ""

    def test_a_trace_changed_after_its_survey_is_refused_not_mixed_into_the_run(self, tmp_path):
        path = mooncake_lines(tmp_path / "t.jsonl", 6)
        stream = trace_requests(path, page_size=256)
        stream.survey(lengths_cost)
        replay = iter(stream)
        next(replay)
        mooncake_lines(path, 7)  # appended to while the replay reads it
        with pytest.raises(InputError, match=rf"^{path}: changed during the run \(a trace is read again"):
            list(replay)
        with pytest.raises(InputError, match="changed during the run"):
            next(iter(stream))

    def test_a_pipe_is_refused_before_it_is_read_as_it_gives_its_records_once(self, tmp_path):
        fifo = tmp_path / "trace.fifo"
        os.mkfifo(fifo)
        with pytest.raises(InputError, match=rf"^{fifo}: cannot read trace: a named pipe \(FIFO\), not a regular file"):
            trace_requests(fifo, page_size=256)
