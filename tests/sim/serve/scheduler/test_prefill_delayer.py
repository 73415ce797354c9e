"""The prefill delayer (``--enable-prefill-delayer``) follows SGLang 0.5.23's ``managers/prefill_delayer.py``:
the decision table of ``_negotiate_should_allow_prefill_pure`` (:166-352), the recent prefill batch window
(:26-50) and the attempted-size estimate (:407-427), and, on a DP-attention server, the ranks' agreement
before a pass (the all-gather, :354-381): a lone rank's prefill waits ``max_delay_passes - 1`` passes."""

from __future__ import annotations

from collections import Counter, deque
from types import SimpleNamespace

import simpy

from sim.app.run import run_scenario
from sim.scenario.load import scenario_from_dict
from sim.serve.scheduler.prefill_delayer import PREFILL_BS_WINDOW, PrefillDelayer


def rank(idx: int, *, waiting: int = 0, decoding: int = 0, cap: int = 16, used: float = 0.5) -> SimpleNamespace:
    """A stand-in for a rank: its queue, its running batch, its KV usage (``used`` of 1,000 pages)."""
    cfg = SimpleNamespace(max_running_requests=cap, l1_pages=1000, page_tokens=1)
    sim = SimpleNamespace(cfg=cfg, rec=SimpleNamespace(counters=Counter()))
    cache = SimpleNamespace(l1=SimpleNamespace(kv_used=int(used * 1000)), tree=SimpleNamespace(evictable_tokens=0))
    return SimpleNamespace(idx=idx, sim=sim, waiting=deque(range(waiting)), prefilling=[],
                           running_batch=SimpleNamespace(decoding=list(range(decoding))), cache=cache)  # fmt: skip


def delayer(ranks, max_delay_passes: int = 5, watermark: float | None = None) -> PrefillDelayer:
    return PrefillDelayer(simpy.Environment(), ranks, None, max_delay_passes, watermark)


class TestDecisionTable:
    def test_some_ranks_prefillable_delays_max_delay_passes_less_one_then_releases(self):
        ranks = [rank(0, waiting=1), rank(1, decoding=4)]
        d = delayer(ranks, max_delay_passes=5)
        verdicts = [d._decide(ranks) for _ in range(6)]
        assert verdicts == [False] * 4 + [True, False]  # the 5th is wait_timeout; the next delay starts over
        assert ranks[0].sim.rec.counters["prefill_delayed_passes"] == 5

    def test_no_rank_prefillable_allows_and_ends_a_delay(self):
        busy, idle = [rank(0, waiting=1), rank(1)], [rank(0), rank(1)]
        d = delayer(busy, max_delay_passes=3)
        assert d._decide(busy) is False and d.delayed == 1
        d.ranks = idle
        assert d._decide(idle) is True and d.delayed is None

    def test_a_rank_not_gathered_is_not_prefillable(self):
        ranks = [rank(0, waiting=1), rank(1, waiting=1)]
        d = delayer(ranks)
        assert d._decide(ranks[:1]) is False  # rank 1 asleep: mixed
        assert d._decide(ranks) is True  # both: no slot shortage, allowed

    def test_all_prefillable_delays_only_when_the_free_slots_cannot_take_the_largest_recent_batch(self):
        ranks = [rank(0, waiting=8, decoding=10), rank(1, waiting=8, decoding=12)]
        d = delayer(ranks)
        d.recent[0].extend([3, 5])
        assert d._decide(ranks) is True  # 16 - 12 = 4 free < 5, but the first time is skipped (skip_first_delayer)
        assert d._decide(ranks) is False
        d.recent[0].append(4)  # the window's max is still 5
        assert d._decide(ranks) is False
        d.recent[0].clear()
        d.recent[0].append(4)
        assert d._decide(ranks) is True  # 4 free >= 4

    def test_a_prefillable_rank_under_the_low_watermark_forces_the_release(self):
        ranks = [rank(0, waiting=1, used=0.2), rank(1, decoding=4, used=0.9)]
        assert delayer(ranks, watermark=0.3)._decide(ranks) is True
        assert delayer(ranks, watermark=0.1)._decide(ranks) is False
        idle_low = [rank(0, waiting=1, used=0.9), rank(1, decoding=4, used=0.1)]  # only prefillable ranks count
        assert delayer(idle_low, watermark=0.3)._decide(idle_low) is False

    def test_a_rank_mid_prefill_is_prefillable_whatever_its_queue(self):
        ranks = [rank(0), rank(1, waiting=1)]
        ranks[0].prefilling.append(object())
        assert delayer(ranks)._decide(ranks) is True


class TestRecentPrefillBatches:
    def test_a_delayed_attempt_counts_its_estimate_and_the_window_keeps_the_last_16(self):
        ranks = [rank(0, waiting=40, decoding=14), rank(1)]
        d = delayer(ranks)
        assert d._decide(ranks) is False
        d.observe(ranks[0], None)  # min(max(queue 40, 1), max(16 - 14, 1)) = 2
        d.observe(ranks[1], None)  # not prefillable: nothing observed
        assert list(d.recent[0]) == [2] and not d.recent[1]
        for size in range(1, PREFILL_BS_WINDOW + 2):
            d.observe(ranks[0], SimpleNamespace(tokens=100, chunks=size))
        assert len(d.recent[0]) == PREFILL_BS_WINDOW and min(d.recent[0]) == 2


def dp2(delay: dict | None, num_requests: int = 1):
    return scenario_from_dict({
        "name": "delayer", "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 0.5, "tp_size": 2, "dp_size": 2, "enable_dp_attention": True},
        "scheduler": {"max_running_requests": 32, **(delay or {})},
        "workload": {"kind": "synthetic", "num_requests": num_requests, "rate": 1000.0, "input_length": 1024,
                     "output_length": 8},
    }, source="test")  # fmt: skip


class TestOnADPServer:
    def test_a_lone_request_waits_for_the_other_rank_max_delay_passes_less_one(self):
        off = run_scenario(dp2(None))
        on = run_scenario(dp2({"enable_prefill_delayer": True, "prefill_delayer_max_delay_passes": 5}))
        assert on.summary["engine"]["prefill_delayed_passes"] == 4
        assert on.summary["engine"]["steps"] == off.summary["engine"]["steps"] + 4
        assert on.requests["ttft_s"].iloc[0] > off.requests["ttft_s"].iloc[0]

    def test_one_pass_of_delay_is_no_delay(self):
        off = run_scenario(dp2(None, num_requests=12))
        one = run_scenario(dp2({"enable_prefill_delayer": True, "prefill_delayer_max_delay_passes": 1}, 12))
        assert one.summary["engine"].pop("prefill_delayed_passes") == 0
        assert one.summary["engine"] == off.summary["engine"]
        assert one.requests["ttft_s"].tolist() == off.requests["ttft_s"].tolist()
