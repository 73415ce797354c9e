"""The bench clients in simulated time: bench_multiturn's sender rules and bench_serving's steps."""

from __future__ import annotations

import pytest

from sim.app.run import run_scenario
from sim.scenario.load import scenario_from_dict
from sim.serve.clients import client_report, format_client_report


def multiturn(**workload):
    wl = {"kind": "multi_turn", "num_clients": 6, "max_parallel": 2, "request_length": 256, "output_length": 8,
          "num_rounds": 3, "request_rate": 50.0, **workload}  # fmt: skip
    return run_scenario(scenario_from_dict({"name": "t", "seed": 5, "hardware": {"kv_mem_gb": 1.0}, "workload": wl}))


def serving(*steps):
    """A single-pool model (no window state to lose), so a repeated prompt hits all its pages but the last."""
    sc = {"name": "t", "seed": 5, "model": {"name": "generic", "generic_bytes_per_token": 1000},
          "hardware": {"kv_mem_gb": 1.0}, "hicache": {"enabled": True, "page_size": 64},
          "workload": {"kind": "bench_serving", "steps": list(steps)}}  # fmt: skip
    return run_scenario(scenario_from_dict(sc))


def in_flight_max(df) -> int:
    events = sorted([(t, 1) for t in df["arrival_s"]] + [(t, -1) for t in df["finish_s"]], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


class TestBenchMultiturn:
    def test_every_round_of_every_client_runs_in_order(self):
        df = multiturn().requests
        assert len(df) == 18
        for _, g in df.groupby("session"):
            g = g.sort_values("arrival_s")
            assert list(g["round"]) == [0, 1, 2]
            assert (g["arrival_s"].to_numpy()[1:] >= g["finish_s"].to_numpy()[:-1]).all()

    def test_never_more_than_max_parallel_in_flight(self):
        assert in_flight_max(multiturn().requests) <= 2

    def test_fifo_serves_clients_in_order_first(self):
        df = multiturn(ready_queue_policy="fifo", max_parallel=6).requests
        first = df[df["round"] == 0].sort_values("arrival_s")
        assert list(first["session"]) == list(range(6))

    def test_the_round_barrier_holds_each_round_until_all_finished_the_last(self):
        df = multiturn(round_barrier=True, max_parallel=3).requests
        for r in (1, 2):
            assert df[df["round"] == r]["arrival_s"].min() >= df[df["round"] == r - 1]["finish_s"].max()
        free = multiturn(max_parallel=3).requests  # without it, rounds overlap
        assert free[free["round"] == 1]["arrival_s"].min() < free[free["round"] == 0]["finish_s"].max()

    def test_the_rate_spaces_sends_by_at_least_the_sleep(self):
        slow = multiturn(request_rate=0.5, max_parallel=6).requests
        assert slow["arrival_s"].max() > 18 / 0.5 * 0.5  # 18 sends, mean gap 2 s

    def test_a_later_question_of_its_own_length(self):
        df = multiturn(sub_question_input_length=100).requests
        assert sorted(df.groupby("round")["input_tokens"].first()) == [256, 256 + 8 + 100, 256 + 2 * (8 + 100)]

    def test_the_round_barrier_pause_delays_each_next_round(self):
        df = multiturn(round_barrier=True, round_barrier_pause_s=10.0, max_parallel=3).requests
        for r in (1, 2):
            assert df[df["round"] == r]["arrival_s"].min() >= df[df["round"] == r - 1]["finish_s"].max() + 10.0

    def test_clients_run_between_min_and_max_rounds_and_the_barrier_counts_only_those_in_the_round(self):
        df = multiturn(num_clients=12, min_rounds=1, max_rounds=4, round_barrier=True, max_parallel=4).requests
        per_client = df.groupby("session")["round"].count()
        assert per_client.between(1, 4).all() and per_client.nunique() > 1  # a draw per client
        assert len(df) == per_client.sum()  # every client's rounds ran, so no round waited for an absent client
        for r in range(1, int(df["round"].max()) + 1):
            assert df[df["round"] == r]["arrival_s"].min() >= df[df["round"] == r - 1]["finish_s"].max()

    def test_the_range_ratio_draws_question_and_answer_lengths_within_the_range(self):
        df = multiturn(num_clients=12, range_ratio=0.5).requests
        first = df[df["round"] == 0]
        assert first["input_tokens"].between(128, 256).all() and first["input_tokens"].nunique() > 1
        assert df["output_tokens"].between(4, 8).all() and df["output_tokens"].nunique() > 1
        fixed = multiturn(num_clients=12).requests
        assert set(fixed[fixed["round"] == 0]["input_tokens"]) == {256} and set(fixed["output_tokens"]) == {8}

    def test_the_report_has_the_clients_summary_and_a_row_per_round(self):
        s = multiturn().summary
        rep = s["client"]
        assert rep["client"] == "bench_multiturn" and rep["summary"]["total_requests"] == 18
        assert [r["round"] for r in rep["rounds"]] == [0, 1, 2]
        assert rep["rounds"][0]["hit_rate"] == 0.0 < rep["rounds"][2]["hit_rate"]
        text = format_client_report(rep)
        assert "Average TTFT" in text and "hit rate" in text


class TestBenchServing:
    STEP = {"num_prompts": 8, "random_input_len": 1024, "random_output_len": 16, "random_range_ratio": 1.0}

    def test_max_concurrency_caps_requests_in_flight(self):
        df = serving({**self.STEP, "max_concurrency": 3}).requests
        assert len(df) == 8 and in_flight_max(df) <= 3

    def test_rate_inf_sends_everything_at_once(self):
        df = serving(self.STEP).requests
        assert df["arrival_s"].max() == 0.0

    def test_a_repeated_step_hits_the_cache_unless_flushed(self):
        kept = serving(self.STEP, self.STEP).summary["client"]["steps"]
        flushed = serving(self.STEP, {**self.STEP, "flush_cache": True}).summary["client"]["steps"]
        assert kept[0]["cache_hit_rate"] == 0.0 and kept[1]["cache_hit_rate"] > 0.9
        assert flushed[1]["cache_hit_rate"] == 0.0

    def test_a_different_seed_sends_different_prompts(self):
        steps = serving(self.STEP, {**self.STEP, "seed": 7}).summary["client"]["steps"]
        assert steps[1]["cache_hit_rate"] == 0.0

    def test_steps_run_one_after_another(self):
        df = serving({**self.STEP, "max_concurrency": 2}, {**self.STEP, "flush_cache": True}).requests
        assert df[df["round"] == 1]["arrival_s"].min() >= df[df["round"] == 0]["finish_s"].max()

    def test_the_report_reads_like_bench_serving(self):
        rep = serving({**self.STEP, "max_concurrency": 4, "label": "c4"}).summary["client"]
        (row,) = rep["steps"]
        assert row["label"] == "c4" and row["completed"] == 8
        assert row["total_throughput"] == pytest.approx((8 * 1024 + 8 * 16) / row["duration_s"])
        assert row["tpot_ms"]["mean"] > 0 and row["ttft_ms"]["p99"] >= row["ttft_ms"]["mean"]
        assert "total tok/s" in format_client_report(rep)

    def test_a_long_step_label_is_printed_whole(self):
        rep = serving({**self.STEP, "max_concurrency": 16, "label": "step 2 conc 16 (warm cache)"}).summary["client"]
        assert "step 2 conc 16 (warm cache)" in format_client_report(rep)


def test_other_workloads_have_no_client_report():
    sc = scenario_from_dict({"name": "t", "workload": {"kind": "synthetic", "num_requests": 3}})
    assert client_report(sc.workload, run_scenario(sc).requests) is None
