"""The timed engine: conservation, determinism, the write-through window in time, load-back overlap, L3."""

import json

import numpy as np
import pytest

from sim.app.run import build, run_scenario, summarise, write_outputs
from sim.base.errors import InputError
from sim.model.costs import default_cost_table, parse_cost_table
from sim.scenario.load import scenario_from_dict


def scenario(**sections):
    base = {
        "name": "t",
        "seed": 3,
        "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 0.5},
        "hicache": {"enabled": True, "hicache_ratio": 4.0},
        "workload": {"kind": "multi_turn", "num_clients": 24, "max_parallel": 8, "request_length": 512,
                     "output_length": 16, "num_rounds": 3, "request_rate": None},
        "output": {"timeseries_interval_s": 0.25},
    }  # fmt: skip
    for key, value in sections.items():
        merge = isinstance(base.get(key), dict) and base[key].get("kind") == value.get("kind", base[key].get("kind"))
        base[key] = {**base[key], **value} if merge else value
    return scenario_from_dict(base, source="test")


def slow_d2h_table(bandwidth_Bps: float):
    """The bundled table with a D2H link ``bandwidth_Bps`` fast and no D2H grid (so the fit is used)."""
    data = default_cost_table().to_json()
    data["entries"] = [e for e in data["entries"] if e["op"] != "d2h"]
    for fit in data["fits"]:
        if fit["op"] == "d2h":
            fit["bandwidth_Bps"] = bandwidth_Bps
    return parse_cost_table(data, "slow-d2h")


@pytest.fixture(scope="module")
def quick_run():
    return run_scenario(scenario())


class TestConservation:
    def test_every_arriving_request_finishes_or_is_dropped_with_a_reason(self, quick_run):
        req = quick_run.summary["requests"]
        assert req["arrived"] == 24 * 3
        assert req["finished"] + sum(req["dropped"].values()) + req["unfinished"] == req["arrived"]
        assert req["unfinished"] == 0

    def test_a_request_that_can_never_fit_is_dropped_with_a_reason(self):
        step = {"random_output_len": 4, "random_range_ratio": 1.0}
        sc = scenario(hardware={"kv_mem_gb": 0.08}, workload={"kind": "bench_serving", "steps": [
            {**step, "num_prompts": 1, "random_input_len": 256}, {**step, "num_prompts": 2, "random_input_len": 16384}]})
        req = run_scenario(sc).summary["requests"]
        assert req["dropped"] == {"exceeds_kv_capacity": 2} and req["finished"] == 1

    def test_a_workload_of_which_no_request_fits_is_refused_before_the_run(self):
        sc = scenario(hardware={"kv_mem_gb": 0.02}, workload={"request_length": 4096, "num_rounds": 1,
                                                              "num_clients": 2})  # fmt: skip
        with pytest.raises(InputError, match="cannot admit the workload's smallest request"):
            run_scenario(sc)

    def test_d2h_bytes_equal_backed_up_pages_times_pool_bytes(self, quick_run):
        s = quick_run.summary
        assert s["link_bytes"]["d2h"] > 0
        assert s["link_bytes"]["d2h"] == s["metrics"]["hicache_backup_bytes_total"]
        assert s["link_bytes"]["h2d"] == s["metrics"]["load_back_bytes_total"]

    def test_metric_names_are_sglangs_or_say_they_are_the_simulators(self, quick_run):
        sglang = {"cached_tokens_total", "evicted_tokens_total", "hicache_dropped_tokens_total",
                  "hicache_backup_tokens_total", "hicache_backup_bytes_total", "load_back_tokens_total",
                  "load_back_bytes_total", "hicache_host_used_tokens", "hicache_host_total_tokens",
                  "prefetched_tokens_total", "backuped_tokens_total", "storage_prefetch_hit_tokens_total",
                  "storage_prefetch_unfulfilled_tokens_total", "realtime_tokens_total",
                  "num_retracted_requests_total", "num_retracted_input_tokens_total",
                  "num_retracted_output_tokens_total"}  # fmt: skip
        proposed = {"kv_age_seconds", "kv_age_tokens_total", "kv_reuses"}  # sgl-project/sglang#38559 (sim.cache.ages)
        m = quick_run.summary["metrics"]
        assert sglang | proposed <= set(m) and all(name.startswith("sim_") for name in set(m) - sglang - proposed)
        assert set(m["cached_tokens_total"]) == {"device", "host", "storage"}

    def test_every_input_token_is_a_hit_or_computed(self, quick_run):
        t = quick_run.summary["tokens"]
        hits = t["device_hit_tokens"] + t["host_hit_tokens"] + t["storage_hit_tokens"]
        assert hits + t["computed_tokens"] == t["input_tokens"]

    def test_no_link_is_busy_more_than_all_the_time(self, quick_run):
        for link, util in quick_run.summary["link_utilization"].items():
            assert 0.0 <= util <= 1.0, link
        ts = quick_run.sim.rec.timeseries_frame(0.25, 1)
        for link in ("h2d", "d2h", "l3_read", "l3_write"):
            assert ts[f"util_{link}"].between(0.0, 1.0 + 1e-9).all(), link


class TestDeterminism:
    def test_same_scenario_and_seed_give_identical_summary_bytes(self, tmp_path):
        for name in ("a", "b"):
            write_outputs(run_scenario(scenario()), tmp_path / name)
        assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()

    def test_different_seeds_give_different_results(self, quick_run):
        other = run_scenario(scenario(seed=4)).summary
        assert other["ttft_s"] != quick_run.summary["ttft_s"]


class TestWriteThroughWindow:
    def test_a_slow_d2h_link_holds_pending_nodes_and_shows_as_a_stall(self):
        sc = scenario(hardware={"kv_mem_gb": 0.15}, hicache={"hicache_ratio": 8.0}, workload={"num_clients": 32})
        fast = run_scenario(sc).summary
        sim, arrivals, _ = build(sc, slow_d2h_table(2e8))  # 0.2 GB/s: ~50 ms per 9 MB page
        tree = sim.instances[0].cache.c.tree  # V4: SGLang's FULL + SWA tree (sim.cache.v4.swacache)
        evicted_locked = []
        evict = tree.evict_leaf

        def guarded(node, tracker):
            if node.pending is not None or node.lock or node.swa_lock:
                evicted_locked.append(node)
            evict(node, tracker)

        tree.evict_leaf = guarded
        sim.run(arrivals)
        slow = summarise(sc, sim)
        assert tree.counts["evicted_leaves"] > 0 and not evicted_locked
        assert slow["engine"]["admission_stalls"] > fast["engine"]["admission_stalls"]
        assert slow["engine"]["blocked_s"] > fast["engine"]["blocked_s"]
        assert slow["link_utilization"]["d2h"] > fast["link_utilization"]["d2h"]
        assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"]


class TestWriteBack:
    SC = {"hardware": {"kv_mem_gb": 0.15}, "hicache": {"hicache_ratio": 8.0, "write_policy": "write_back"},
          "workload": {"num_clients": 32}}  # fmt: skip

    def test_write_back_copies_move_on_the_d2h_link(self):
        s = run_scenario(scenario(**self.SC)).summary
        assert s["metrics"]["hicache_backup_bytes_total"] > 0
        assert s["link_bytes"]["d2h"] == s["metrics"]["hicache_backup_bytes_total"]

    def test_an_eviction_waits_for_the_copy_of_what_it_evicts(self):
        sc = scenario(**self.SC)
        fast = run_scenario(sc).summary
        sim, arrivals, _ = build(sc, slow_d2h_table(2e8))
        sim.run(arrivals)
        slow = summarise(sc, sim)
        assert slow["metrics"]["hicache_backup_bytes_total"] > 0
        assert slow["metrics"]["sim_write_back_wait_seconds_total"] > fast["metrics"]["sim_write_back_wait_seconds_total"]
        assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"]
        assert slow["simulated_s"] > fast["simulated_s"]

    def test_evicted_pages_reach_storage_after_their_copy(self):
        s = run_scenario(scenario(**self.SC, l3={"enabled": True, "read_gbps": 20.0, "write_gbps": 20.0})).summary
        m = s["metrics"]
        assert m["backuped_tokens_total"] > 0 and s["link_bytes"]["l3_write"] > 0
        assert m["backuped_tokens_total"] <= m["hicache_backup_tokens_total"]["kv"]


class TestLoadBack:
    def test_a_request_first_token_waits_for_its_load(self, quick_run):
        df = quick_run.sim.rec.requests_frame()
        loaded = df[df["load_back_s"] > 0]
        assert len(loaded) > 0
        assert (loaded["first_token_s"] >= loaded["admitted_s"] + loaded["load_back_s"] - 1e-12).all()

    def test_l1_plus_l2_serves_history_that_l1_alone_recomputes(self, quick_run):
        l1_only = run_scenario(scenario(hicache={"enabled": False})).summary
        both = quick_run.summary
        assert both["hit_rate"]["host"] > 0 and l1_only["hit_rate"]["host"] == 0
        assert both["hit_rate"]["total"] > l1_only["hit_rate"]["total"]
        assert both["throughput"]["input_tokens_per_s"] > l1_only["throughput"]["input_tokens_per_s"]


class TestL3:
    @pytest.mark.parametrize("policy", ["best_effort", "timeout", "wait_complete"])
    def test_instances_reuse_each_others_pages_only_through_storage(self, policy):
        sc = scenario(
            hicache={"hicache_ratio": 1.0, "prefetch_policy": policy, "prefetch_threshold": 256},
            l3={"enabled": True, "read_gbps": 20.0, "write_gbps": 20.0},
            cluster={"instances": 2, "router": "round_robin"},
        )
        s = run_scenario(sc).summary
        assert s["requests"]["finished"] == 72
        assert s["link_bytes"]["l3_write"] > 0
        if policy != "best_effort":
            assert s["hit_rate"]["storage"] > 0
            assert s["metrics"]["prefetched_tokens_total"] > 0

    def test_the_printed_summary_reports_the_l3_reads(self):
        from sim.app.run import format_summary

        sc = scenario(hicache={"hicache_ratio": 1.0}, l3={"enabled": True, "read_gbps": 20.0, "write_gbps": 20.0},
                      cluster={"instances": 2, "router": "round_robin"})  # fmt: skip
        run = run_scenario(sc)
        m = run.summary["metrics"]
        line = next(x for x in format_summary(run).splitlines() if x.startswith("L3 reads"))
        assert f"{m['sim_prefetches_total']:,}" in line and f"{m['prefetched_tokens_total']:,} tokens landed" in line


class TestPrefetch:
    """L3 reads as SGLang's scheduler runs them: issued at queue time, polled at admission."""

    def build(self, read_gbps=0.001, policy="timeout", latency_ms=1.0, **hicache):
        sc = scenario(hicache={"prefetch_policy": policy, "prefetch_threshold": 256, **hicache},
                      l3={"enabled": True, "read_gbps": read_gbps, "write_gbps": 20.0, "latency_ms": latency_ms})  # fmt: skip
        sim, _, _ = build(sc)
        return sim, sim.instances[0]

    @staticmethod
    def request(rid, name, pages=8, stored=True, sim=None):
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        keys = [(name, i) for i in range(pages)]
        if stored:
            sim.storage.put(keys, window_at_end=True)
        return Running(Request(rid, 0.0, pages * 256 + 1, 4, keys), 0)

    def test_a_read_starts_when_the_lookup_issued_at_queue_time_ends(self):
        sim, inst = self.build(latency_ms=20.0)
        sim.env.run(until=0.25)
        run = self.request(0, "a", sim=sim)
        inst.submit(run)
        assert run.prefetch is not None and run.prefetch.pages == 8
        assert run.prefetch.t_start == pytest.approx(0.25 + 0.020)  # one lookup call: 8 pages, batches of 128
        assert sim.rec.counters["sim_prefetch_requested_tokens_total"] == 8 * 256

    def test_a_read_takes_its_host_pages_when_it_starts(self):
        sim, inst = self.build()
        run = self.request(0, "a", sim=sim)
        inst.submit(run)
        l2 = inst.cache.l2
        assert (l2.kv_used, l2.swa_used) == (8, inst.cache.window.pages)
        sim.env.run(until=run.prefetch.t_end + 1e-9)
        assert run.prefetched_pages == 8 and (l2.kv_used, l2.swa_used) == (8, inst.cache.window.pages)

    def test_a_host_too_small_for_the_hit_gets_a_partial_read(self):
        sim, inst = self.build(host_pages=6)
        run = self.request(0, "a", sim=sim)
        inst.submit(run)
        assert run.prefetch.pages == 6 and run.prefetch.swa_pages == 0
        assert sim.rec.engine_metrics()["storage_prefetch_unfulfilled_tokens_total"]["host_capacity"] == 2 * 256

    def test_admission_skips_a_request_whose_read_is_running(self):
        sim, inst = self.build()
        reading, cold = self.request(0, "a", sim=sim), self.request(1, "b", stored=False, sim=sim)
        inst.submit(reading)
        inst.submit(cold)
        sim.env.run(until=cold.lookup_done_s)  # the cold request's lookup has drained: a miss
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [1]
        assert [r.req.rid for r in inst.waiting] == [0] and inst.prefetcher.blocked == 1

    def test_the_timeout_counts_from_the_first_blocked_poll_and_scales_with_the_requested_tokens(self):
        sim, inst = self.build(read_gbps=0.004)  # 8 V4 pages and their window (16 MB) at 4 MB/s: a ~4 s read
        run = self.request(0, "a", sim=sim)
        inst.submit(run)
        sim.env.run(until=0.5)
        assert not inst.prefetcher.poll(run)
        deadline = 0.5 + 1.0 + 0.25 * 8 * 256 / 1024
        assert run.prefetch.deadline == pytest.approx(deadline)
        sim.env.run(until=deadline - 0.01)
        assert not inst.prefetcher.poll(run)
        sim.env.run(until=deadline)
        assert inst.prefetcher.poll(run) and run.prefetch is None
        landed = sim.rec.counters["prefetched_tokens_total"]
        assert 0 < landed < 8 * 256
        assert sim.rec.engine_metrics()["storage_prefetch_unfulfilled_tokens_total"]["deadline"] == 8 * 256 - landed
        assert inst.prefetcher.tokens == 0 and inst.links["l3_read"].free_at == pytest.approx(deadline)

    def test_wait_complete_admits_only_after_the_whole_read(self):
        sim, inst = self.build(policy="wait_complete")
        run = self.request(0, "a", sim=sim)
        inst.submit(run)
        sim.env.run(until=5.0)
        assert not inst.prefetcher.poll(run)
        sim.env.run(until=run.prefetch.t_end + 1e-9)
        assert run.prefetch is None and run.prefetched_pages == 8

    @pytest.mark.parametrize(("policy", "held_until"), [("best_effort", None), ("wait_complete", 0.3),
                                                        ("timeout", 0.1 + 1.0)])  # fmt: skip
    def test_a_lookup_that_misses_holds_the_request_until_it_drains(self, policy, held_until):
        """SGLang keeps a queued request out of batches until its storage lookup is drained, even when it
        misses: not under best_effort, and under timeout at most the base timeout from the first poll."""
        sim, inst = self.build(policy=policy, latency_ms=300.0)
        run = self.request(0, "a", stored=False, sim=sim)
        inst.submit(run)
        assert run.prefetch is None and run.lookup_done_s == pytest.approx(0.3)
        sim.env.run(until=0.1)
        assert inst.prefetcher.lookup_released(run) == (held_until is None)
        if held_until is not None:
            assert inst.prefetcher.wake == pytest.approx(min(0.3, held_until))
            sim.env.run(until=0.3)
            assert inst.prefetcher.lookup_released(run)

    def test_a_timeout_releases_a_lookup_slower_than_the_base_timeout(self):
        sim, inst = self.build(policy="timeout", latency_ms=5000.0)
        run = self.request(0, "a", stored=False, sim=sim)
        inst.submit(run)
        sim.env.run(until=0.5)
        assert not inst.prefetcher.lookup_released(run) and run.lookup_deadline == pytest.approx(1.5)
        sim.env.run(until=1.5)
        assert inst.prefetcher.lookup_released(run)

    def test_lookups_run_one_at_a_time(self):
        """One prefetch thread asks the storage for one request after another (``cache_controller.py:1333-1366``)."""
        sim, inst = self.build(policy="wait_complete", latency_ms=100.0)
        runs = [self.request(rid, f"r{rid}", stored=False, sim=sim) for rid in range(3)]
        for run in runs:
            inst.submit(run)
        assert [r.lookup_done_s for r in runs] == pytest.approx([0.1, 0.2, 0.3])

    def test_a_miss_is_looked_up_again_every_8_passes_at_most_8_times(self):
        sim, inst = self.build()
        head = self.request(0, "h", stored=False, sim=sim)
        run = self.request(1, "a", stored=False, sim=sim)
        inst.submit(head)
        inst.submit(run)
        assert run.prefetch is None and run.req.rid in inst.prefetcher.retries
        inst.prefetcher.retry_due()  # the first pass that sees the miss schedules it 8 passes on
        for _ in range(7):
            inst.prefetcher.retry_due()
        assert sim.rec.counters["sim_prefetch_retries_total"] == 0
        inst.prefetcher.retry_due()
        assert sim.rec.counters["sim_prefetch_retries_total"] == 1
        for _ in range(200):
            inst.prefetcher.retry_due()
        assert sim.rec.counters["sim_prefetch_retries_total"] == 8 and not inst.prefetcher.retries

    def test_due_lookups_are_reissued_in_queue_order_and_a_request_that_left_the_queue_is_not(self):
        sim, inst = self.build()
        inst.submit(self.request(0, "h", stored=False, sim=sim))
        runs = [self.request(rid, f"r{rid}", stored=False, sim=sim) for rid in (1, 2, 3)]
        for run in runs:
            inst.submit(run)
        inst.waiting.rotate(-1)  # r1 becomes the head, h goes last (as an lpm reorder would, renumbered)
        for run in inst.waiting:
            run.queue_seq = next(inst.queue_seq)
        del inst.prefetcher.retries[3]  # r3 admitted meanwhile
        started = []
        reissue = inst.prefetcher.start
        inst.prefetcher.start = lambda run: (started.append(run.req.rid), reissue(run))
        for _ in range(9):
            inst.prefetcher.retry_due()
        assert started == [2, 0]  # r1 is the head: never retried; h now queues behind r2

    def test_a_retry_finds_pages_written_since_the_miss(self):
        sim, inst = self.build()
        inst.submit(self.request(0, "h", stored=False, sim=sim))
        run = self.request(1, "a", stored=False, sim=sim)
        inst.submit(run)
        sim.storage.put(run.req.keys, window_at_end=True)
        for _ in range(9):
            inst.prefetcher.retry_due()
        assert run.prefetch is not None and run.prefetch_attempts == 1

    def test_the_queue_head_is_never_held_back_for_a_retry(self):
        sim, inst = self.build()
        run = self.request(0, "a", stored=False, sim=sim)
        inst.submit(run)
        inst.prefetcher.retry_due()
        assert not inst.prefetcher.retries

    def test_reads_in_flight_ask_for_at_most_half_the_host_pool(self):
        sim, inst = self.build()
        assert inst.prefetcher.cap == 0.5 * sim.cfg.l2_pages * 256
        rid = 0
        while inst.prefetcher.tokens < inst.prefetcher.cap:
            inst.submit(self.request(rid, f"r{rid}", sim=sim))
            rid += 1
        refused = self.request(rid, "late", sim=sim)
        inst.submit(refused)
        assert refused.prefetch is None and refused.req.rid in inst.prefetcher.retries
        assert sim.rec.counters["sim_prefetch_rate_limited_total"] == 1


class TestTraceInTime:
    def test_a_mooncake_trace_replays_with_its_own_timestamps(self, tmp_path):
        lines = [{"timestamp": 1000 * i, "input_length": 1100, "output_length": 8, "hash_ids": [7, 8, 9 + i]}
                 for i in range(5)]  # fmt: skip
        trace = tmp_path / "t.jsonl"
        trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        sc = scenario(workload={"kind": "trace", "path": str(trace), "format": "mooncake"})
        run = run_scenario(sc)
        df = run.sim.rec.requests_frame().sort_values("rid")
        assert np.allclose(df["arrival_s"], [0, 1, 2, 3, 4])
        assert (df["device_hit_tokens"].iloc[1:] == 1024).all()  # two shared 512-token blocks


class TestSchedulePolicy:
    @pytest.mark.parametrize(("policy", "first"), [("fcfs", 0), ("lpm", 1)])
    def test_lpm_admits_the_longest_cached_prefix_first(self, policy, first):
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sc = scenario(scheduler={"schedule_policy": policy, "max_running_requests": 1})
        sim, _, _ = build(sc)
        inst = sim.instances[0]
        cached = [("c", i) for i in range(4)]
        inst.cache.serve(cached, 4 * 256 + 1)  # pages 0..3 of request 1's prompt are on the GPU
        cold = Request(0, 0.0, 1024, 8, [("x", i) for i in range(4)])
        warm = Request(1, 0.0, 1280, 8, [*cached, ("c", 4)])
        for req in (cold, warm):
            inst.waiting.append(Running(req, 0))
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [first]

    def test_lpm_counts_a_prefix_held_on_the_host(self):
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sim, _, _ = build(scenario(scheduler={"schedule_policy": "lpm", "max_running_requests": 1}))
        inst = sim.instances[0]
        cached = [("c", i) for i in range(4)]
        inst.cache.insert_host(cached, 4, window=True)  # on the host only
        for req in (Request(0, 0.0, 1280, 8, [("x", i) for i in range(5)]), Request(1, 0.0, 1280, 8, [*cached, ("c", 4)])):
            inst.waiting.append(Running(req, 0))
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [1]

    def test_lpm_puts_a_cold_request_sharing_a_prefix_with_an_earlier_one_last(self):
        """SGLang's in-batch prefix caching: one of them computes the shared prefix, the other then hits it."""
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sim, _, _ = build(scenario(scheduler={"schedule_policy": "lpm"}))
        inst = sim.instances[0]
        shared = [("s", i) for i in range(2)]
        reqs = [Request(0, 0.0, 1280, 8, [*shared, ("a", 0), ("a", 1), ("a", 2)]),
                Request(1, 0.0, 1280, 8, [*shared, ("b", 0), ("b", 1), ("b", 2)]),
                Request(2, 0.0, 1280, 8, [("c", i) for i in range(5)])]  # fmt: skip
        for req in reqs:
            inst.waiting.append(Running(req, 0))
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [0, 2, 1]

    def test_lpm_ignores_a_prefix_that_fails_the_window_check(self):
        """A host copy without window state is no valid match end for V4: lpm does not count it."""
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sim, _, _ = build(scenario(scheduler={"schedule_policy": "lpm", "max_running_requests": 1}))
        inst = sim.instances[0]
        inst.cache.insert_host([("w", i) for i in range(4)], 4, window=False)
        inst.cache.insert_host([("v", 0)], 1, window=True)
        no_window = Request(0, 0.0, 1280, 8, [("w", i) for i in range(5)])
        one_page = Request(1, 0.0, 1280, 8, [("v", i) for i in range(5)])
        for req in (no_window, one_page):
            inst.waiting.append(Running(req, 0))
        assert inst.cache.tree.peek(no_window.keys, 4)[1] == 4  # the raw prefix is longer
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [1]


class TestRetraction:
    """V4 decode pages are allocated as they fill; when a pool runs dry SGLang retracts (schedule_batch.py)."""

    @staticmethod
    def run(kv_mem_gb, monkeypatch=None, seen=None):
        from sim.serve.scheduler.running_batch import RunningBatch

        if seen is not None:
            original = RunningBatch.retract

            def spy(self, run, requeue=True, keep_free=0):
                live = [x for _, _, x in self.decoding] + [run]
                seen.append((self.outputs(run), min(self.outputs(x) for x in live), run.resumed))
                original(self, run, requeue, keep_free)

            monkeypatch.setattr(RunningBatch, "retract", spy)
        sc = scenario(hardware={"kv_mem_gb": kv_mem_gb}, hicache={"enabled": False},
                      workload={"request_length": 256, "output_length": 1500, "num_rounds": 1, "num_clients": 24,
                                "max_parallel": 24})  # fmt: skip
        return run_scenario(sc).summary

    def test_the_request_with_the_fewest_outputs_goes_and_resumes_with_what_it_made(self, monkeypatch):
        seen = []
        s = self.run(0.1, monkeypatch, seen)
        assert s["metrics"]["num_retracted_requests_total"] == len(seen) > 0
        assert all(outputs == fewest for outputs, fewest, _ in seen)
        # the retracted requests had made outputs, which they prefill again with their prompts and do not make twice
        assert s["metrics"]["num_retracted_output_tokens_total"] > 0
        assert s["requests"]["finished"] == 24 and s["tokens"]["output_tokens"] == 24 * 1500

    def test_the_last_request_that_still_cannot_fit_is_aborted(self, monkeypatch):
        """SGLang's budget sets a fixed-length request's whole output aside, so a lone request's decode step finds
        its page; a pool that runs dry under it anyway (here: every step) aborts it (schedule_batch.py:3508-3530)."""
        from sim.cache.v4.hicache import V4HiCache

        def dry(self, adm, steps):
            raise MemoryError("no page")

        monkeypatch.setattr(V4HiCache, "decode", dry)
        sc = scenario(hicache={"enabled": False}, workload={"request_length": 256, "output_length": 100, "num_rounds": 1,
                                                            "num_clients": 1, "max_parallel": 1})  # fmt: skip
        s = run_scenario(sc).summary
        assert s["requests"]["finished"] == 0 and s["requests"]["dropped"] == {"out_of_memory": 1}


class TestPrefillAndDecodePasses:
    """SGLang runs a prefill batch whenever one forms and decodes only when none does (``get_next_batch_to_run``,
    ``scheduler.py:3894-4025``); ``--enable-mixed-chunk`` puts the decode rows into the prefill's forward.

    A hand-timed setup: the generic model, 1 ms per prefill token (1e9 FLOPs at 1 TFLOP/s), 1 ms per decode
    step (1 GB of weights at 1 TB/s), no attention or KV-read term, no step overhead. Request A (100 prompt
    tokens, 11 output) arrives at 0 and request B (1,000 prompt tokens, 11 output) at 102.5 ms, in A's third
    decode step.
    """

    @staticmethod
    def run(tmp_path, mixed: bool, **scheduler):
        lines = [{"timestamp": 0, "input_length": 100, "output_length": 11, "hash_ids": [1]},
                 {"timestamp": 102.5, "input_length": 1000, "output_length": 11, "hash_ids": [2, 3]}]  # fmt: skip
        trace = tmp_path / "two.jsonl"
        trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        sc = scenario(
            model={"name": "generic", "generic_bytes_per_token": 1000},
            hardware={"kv_mem_gb": 0.5, "peak_tflops": 1.0, "hbm_bandwidth_tbps": 1.0},
            hicache={"enabled": False}, scheduler={"enable_mixed_chunk": mixed, **scheduler},
            compute={"prefill_flops_per_token": 1e9, "attn_flops_per_token_per_ctx": 0, "decode_bytes_per_step": 1e9,
                     "kv_bytes_per_token_read": 0, "mfu": 1.0, "mbu": 1.0, "step_overhead_ms": 0},
            workload={"kind": "trace", "path": str(trace), "format": "mooncake"},
        )  # fmt: skip
        rec = run_scenario(sc).sim.rec
        df = rec.requests_frame().sort_values("rid").set_index("rid")
        return [{**row, "tpot_s": (row["finish_s"] - row["first_token_s"]) / 10}
                for row in df[["first_token_s", "finish_s", "ttft_s"]].to_dict("records")], sorted(rec.tpot)  # fmt: skip

    def test_a_decoding_request_makes_no_progress_during_a_prefill_pass(self, tmp_path):
        (a, b), tpots = self.run(tmp_path, mixed=False)
        assert a["ttft_s"] == pytest.approx(0.100)  # its own 100-token prefill
        # 3 decode steps (to 103 ms), B's 1 s prefill pass (A waits), then A's 7 remaining steps.
        assert a["finish_s"] == pytest.approx(0.103 + 1.0 + 0.007)
        assert b["ttft_s"] == pytest.approx(1.103 - 0.1025)
        assert b["finish_s"] == pytest.approx(1.103 + 0.010)  # 10 decode steps, A's last 7 alongside
        # TPOT over the 10 tokens after the first: A's holds the whole prefill pass it sat out.
        assert tpots == pytest.approx(sorted([b["tpot_s"], a["tpot_s"]])) and a["tpot_s"] == pytest.approx(0.101)
        assert b["tpot_s"] == pytest.approx(0.001)

    def test_with_mixed_chunk_a_decoding_request_advances_inside_the_prefill_pass(self, tmp_path):
        (a, b), _ = self.run(tmp_path, mixed=True)
        # The mixed pass costs max(1 s of prefill, 1 ms of decode) and moves A one token: 6 steps are left.
        assert a["finish_s"] == pytest.approx(0.103 + 1.0 + 0.006)
        assert b["ttft_s"] == pytest.approx(1.103 - 0.1025)
        assert b["finish_s"] == pytest.approx(1.103 + 0.010)


    def test_the_prefill_decode_interval_holds_a_prefill_behind_that_many_decode_passes(self, tmp_path):
        # A's prefill (to 100 ms) owes 5 decode passes: B, arriving in the third, is prefilled after the fifth.
        (a, b), _ = self.run(tmp_path, mixed=False, prefill_decode_interval=5)
        assert b["ttft_s"] == pytest.approx(1.105 - 0.1025)
        assert a["finish_s"] == pytest.approx(0.105 + 1.0 + 0.005)  # 5 steps, B's pass, A's last 5

    def test_the_interval_applies_only_from_its_minimum_running_batch(self, tmp_path):
        (_, b), _ = self.run(tmp_path, mixed=False, prefill_decode_interval=5, prefill_decode_interval_min_bs=2)
        assert b["ttft_s"] == pytest.approx(1.103 - 0.1025)  # one request decoding: B goes at once


class TestFirstTokensUnderTheOverlapScheduler:
    """SGLang's overlap scheduler processes a pass's results after launching the next pass; with HiCache on, the
    scheduler's stream waits for that whole prefill forward (``shared_read_event.py:35-41``), so a prefill pass's
    first tokens, and the requests it finishes, reach the client when the next prefill pass ends.

    Hand-timed as above (1 ms per prefill token, 1 ms per decode step): A and B, 1,000 prompt tokens each,
    arrive together; a 1,000-token chunk makes A's prefill the first pass (to 1 s) and B's the second (to 2 s).
    """

    @staticmethod
    def run(tmp_path, hicache: bool, overlap: bool = True, output_len: int = 11, **scheduler):
        lines = [{"timestamp": 0, "input_length": 1000, "output_length": output_len, "hash_ids": [1, 2]},
                 {"timestamp": 0, "input_length": 1000, "output_length": output_len, "hash_ids": [3, 4]}]  # fmt: skip
        trace = tmp_path / "two.jsonl"
        trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        sc = scenario(
            model={"name": "generic", "generic_bytes_per_token": 1000},
            hardware={"kv_mem_gb": 0.5, "peak_tflops": 1.0, "hbm_bandwidth_tbps": 1.0},
            hicache={"enabled": hicache, "hicache_ratio": 2.0, "page_size": 8},  # 1,000 tokens: whole pages, uncut
            scheduler={"chunked_prefill_size": 1000, "overlap_schedule": overlap, **scheduler},
            compute={"prefill_flops_per_token": 1e9, "attn_flops_per_token_per_ctx": 0, "decode_bytes_per_step": 1e9,
                     "kv_bytes_per_token_read": 0, "mfu": 1.0, "mbu": 1.0, "step_overhead_ms": 0},
            workload={"kind": "trace", "path": str(trace), "format": "mooncake"},
        )  # fmt: skip
        df = run_scenario(sc).sim.rec.requests_frame().sort_values("rid")
        return df[["ttft_s", "e2e_s"]].to_dict("records")

    def test_without_hicache_each_pass_streams_its_own_first_tokens(self, tmp_path):
        a, b = self.run(tmp_path, hicache=False)
        assert (a["ttft_s"], b["ttft_s"]) == pytest.approx((1.0, 2.0))

    def test_with_hicache_the_first_pass_streams_when_the_next_prefill_ends(self, tmp_path):
        a, b = self.run(tmp_path, hicache=True)
        assert a["ttft_s"] == pytest.approx(2.0)
        # B's pass is followed by a decode step, whose fence is only its metadata reads: B streams at once.
        assert b["ttft_s"] == pytest.approx(2.0)
        # Decoding is not delayed: both make their 10 other tokens in the 10 decode steps after B's prefill.
        assert (a["e2e_s"], b["e2e_s"]) == pytest.approx((2.010, 2.010))

    def test_a_request_finished_by_its_prefill_is_reported_late_too(self, tmp_path):
        a, b = self.run(tmp_path, hicache=True, output_len=1)
        assert (a["ttft_s"], a["e2e_s"]) == pytest.approx((2.0, 2.0))
        assert (b["ttft_s"], b["e2e_s"]) == pytest.approx((2.0, 2.0))

    def test_without_the_overlap_scheduler_results_stream_at_their_pass_end(self, tmp_path):
        a, b = self.run(tmp_path, hicache=True, overlap=False)
        assert (a["ttft_s"], b["ttft_s"]) == pytest.approx((1.0, 2.0))

    def test_without_overlap_between_consecutive_prefills_each_streams_at_its_end(self, tmp_path):
        # SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP (scheduler.py:2136-2156): A's results are processed before B launches.
        a, b = self.run(tmp_path, hicache=True, disable_consecutive_prefill_overlap=True)
        assert (a["ttft_s"], b["ttft_s"]) == pytest.approx((1.0, 2.0))


class TestTokenizer:
    """SGLang's tokenizer manager encodes each text prompt on its event loop before the scheduler sees it
    (``tokenizer_manager.py:1058-1066``), so prompts that arrive together reach the scheduler one encode apart.

    Hand-timed as above (1 ms per prefill token, a 2,000-token chunk): A and B, 1,000 prompt tokens each, arrive
    together; the tokenizer encodes 10,000 tokens a second, 0.1 s a prompt.
    """

    @staticmethod
    def run(tmp_path, rate: float | None, workers: int = 1):
        lines = [{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]},
                 {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [3, 4]}]  # fmt: skip
        trace = tmp_path / "two.jsonl"
        trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        sc = scenario(
            model={"name": "generic", "generic_bytes_per_token": 1000},
            hardware={"kv_mem_gb": 0.5, "peak_tflops": 1.0, "hbm_bandwidth_tbps": 1.0},
            hicache={"enabled": False, "page_size": 8},  # 1,000 tokens: whole pages, so no chunk is cut at a page
            scheduler={"chunked_prefill_size": 2000, "tokenizer_tokens_per_s": rate, "tokenizer_workers": workers},
            compute={"prefill_flops_per_token": 1e9, "attn_flops_per_token_per_ctx": 0, "decode_bytes_per_step": 1e9,
                     "kv_bytes_per_token_read": 0, "mfu": 1.0, "mbu": 1.0, "step_overhead_ms": 0},
            workload={"kind": "trace", "path": str(trace), "format": "mooncake"},
        )  # fmt: skip
        df = run_scenario(sc).sim.rec.requests_frame().sort_values("rid")
        return list(df["ttft_s"])

    def test_prompts_given_as_token_ids_reach_the_scheduler_together(self, tmp_path):
        assert self.run(tmp_path, rate=None) == pytest.approx([2.0, 2.0])  # one 2,000-token pass

    def test_text_prompts_are_encoded_one_after_another_and_split_the_pass(self, tmp_path):
        # A reaches the scheduler at 0.1 s and is prefilled alone (to 1.1 s); B, encoded by 0.2 s, waits for it.
        assert self.run(tmp_path, rate=1e4) == pytest.approx([0.1 + 1.0, 0.1 + 1.0 + 1.0])

    def test_more_tokenizer_workers_encode_in_parallel(self, tmp_path):
        assert self.run(tmp_path, rate=1e4, workers=2) == pytest.approx([0.1 + 2.0, 0.1 + 2.0])


class TestChunkedPrefill:
    """SGLang holds at most one partly prefilled request (``chunked_req``, ``scheduler.py:4324-4327``), continues it
    first in the next prefill batch, and charges its chunk and every admitted request's to the same pass budgets
    (``PrefillAdder``, ``schedule_policy.py:874-941, 1140-1226``); when the pools cannot take its next chunk it
    waits, out of the batch."""

    @staticmethod
    def partly_prefilled(inst) -> int:
        return sum(inst.adder.started(r) for r in inst.prefilling)

    def test_admission_stops_once_the_passes_chunk_budget_is_spent(self):
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sim, _, _ = build(scenario(scheduler={"chunked_prefill_size": 2048}))
        inst = sim.instances[0]
        for rid in range(3):  # 1,280 + 768 of the second fill the 2,048-token pass; the third waits
            inst.waiting.append(Running(Request(rid, 0.0, 1280, 8, [(rid, i) for i in range(5)]), 0))
        inst.adder.admit()
        assert [r.req.rid for r in inst.prefilling] == [0, 1]
        tokens, _, chunks, _, done = inst.adder.plan_prefill()
        assert tokens == 2048 and chunks == 2 and self.partly_prefilled(inst) == 1  # the second is chunked
        inst.prefill_done(*done)
        inst.adder.admit()  # its remaining 512 tokens are charged first: the third joins the pass
        assert [r.req.rid for r in inst.prefilling] == [1, 2]

    def test_a_chunked_request_that_finds_no_room_waits_and_none_other_starts_beside_it(self, monkeypatch):
        from sim.serve.scheduler.req import Running
        from sim.workload.request import Request

        sim, _, _ = build(scenario(scheduler={"chunked_prefill_size": 1024}))
        inst = sim.instances[0]
        for rid in range(2):
            inst.waiting.append(Running(Request(rid, 0.0, 2560, 8, [(rid, i) for i in range(10)]), 0))
        inst.adder.admit()
        inst.adder.plan_prefill()
        chunked = inst.prefilling[0]
        extend = inst.cache.extend
        monkeypatch.setattr(inst.cache, "extend", lambda adm, n: 0 if adm is chunked.adm else extend(adm, n))
        inst.adder.admit()
        assert inst.adder.plan_prefill()[0] == 0  # parked: no chunk runs this pass
        assert inst.prefilling[0] is chunked and chunked.prefill_pos == 1024 and self.partly_prefilled(inst) == 1
        monkeypatch.setattr(inst.cache, "extend", extend)  # room again: it continues first
        inst.adder.admit()
        inst.adder.plan_prefill()
        assert chunked.prefill_pos == 2048 and self.partly_prefilled(inst) == 1

    def test_long_agentic_prompts_on_a_small_pool_finish_with_one_chunked_request_at_a_time(self, monkeypatch):
        """The lane replay that used to stall: a chunked prompt short of room while requests admitted behind it,
        past the pass's chunk budget, held their cached prefixes and loaded host hits on the GPU."""
        from pathlib import Path

        from sim.scenario.load import load_scenario
        from sim.serve.scheduler.schedule_policy import PrefillAdder

        most = []
        plan = PrefillAdder.plan_prefill

        def spy(self):
            out = plan(self)
            most.append(sum(self.started(r) for r in self.inst.prefilling))
            return out

        monkeypatch.setattr(PrefillAdder, "plan_prefill", spy)
        path = Path(__file__).resolve().parents[3] / "scenarios" / "dsv4_flash_agentic_lanes.yaml"
        sc = load_scenario(path, ["workload.kind=agentic", "workload.lanes=4", "workload.sessions=8",
                                  "workload.benchmark_duration_s=300"])  # fmt: skip
        req = run_scenario(sc).summary["requests"]
        assert max(most) == 1  # chunked prompts occurred, never two at once
        assert req["unfinished"] == 0 and req["finished"] > 0
