"""The timed engine: conservation, determinism, the write-through window in time, load-back overlap, L3."""

import json

import numpy as np
import pytest

from sim.costs import default_cost_table, parse_cost_table
from sim.run import build, run_scenario, summarise, write_outputs
from sim.scenario import scenario_from_dict


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
        sc = scenario(hardware={"kv_mem_gb": 0.02}, workload={"request_length": 4096, "num_rounds": 1,
                                                              "num_clients": 2})  # fmt: skip
        req = run_scenario(sc).summary["requests"]
        assert req["dropped"] == {"exceeds_kv_capacity": 2} and req["finished"] == 0

    def test_d2h_bytes_equal_backed_up_pages_times_pool_bytes(self, quick_run):
        s = quick_run.summary
        assert s["link_bytes"]["d2h"] > 0
        assert s["link_bytes"]["d2h"] == s["metrics"]["hicache_backup_bytes_total"]
        assert s["link_bytes"]["h2d"] == s["metrics"]["load_back_bytes_total"]

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
        cache = sim.instances[0].cache
        evicted_locked = []
        evict = cache._evict_device

        def guarded(node):
            if node.pending is not None or node.lock_ref:
                evicted_locked.append(node)
            evict(node)

        cache._evict_device = guarded
        sim.run(arrivals)
        slow = summarise(sc, sim)
        assert cache.stats.evictions > 0 and not evicted_locked
        assert slow["engine"]["admission_stalls"] > fast["engine"]["admission_stalls"]
        assert slow["engine"]["blocked_s"] > fast["engine"]["blocked_s"]
        assert slow["link_utilization"]["d2h"] > fast["link_utilization"]["d2h"]
        assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"]


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
        from sim.engine import _Running
        from sim.workload import Request

        sc = scenario(scheduler={"schedule_policy": policy, "max_running_requests": 1})
        sim, _, _ = build(sc)
        inst = sim.instances[0]
        cached = [("c", i) for i in range(4)]
        inst.cache.serve(cached, 4 * 256 + 1)  # pages 0..3 of request 1's prompt are on the GPU
        cold = Request(0, 0.0, 1024, 8, [("x", i) for i in range(4)])
        warm = Request(1, 0.0, 1280, 8, [*cached, ("c", 4)])
        for req in (cold, warm):
            inst.waiting.append(_Running(req, 0))
        inst._admit()
        assert [r.req.rid for r in inst.prefilling] == [first]
