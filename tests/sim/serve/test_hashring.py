"""The router's DP-aware consistent hashing (sgl-model-gateway ``policies/consistent_hashing.rs``, the ring of
``core/worker_registry.rs``): 150 virtual nodes a worker, a key to the first worker clockwise from its hash,
each attention-DP rank a worker, the session as the routing key."""

from __future__ import annotations

import bisect

from sim.app.run import run_scenario
from sim.scenario.load import scenario_from_dict
from sim.serve.hashring import VIRTUAL_NODES_PER_WORKER, HashRing, dp_aware_urls, ring_position, routing_key


class TestRing:
    def test_each_worker_has_150_virtual_nodes_and_a_key_goes_clockwise_to_the_next(self):
        ring = HashRing(["a", "b", "c"])
        assert len(ring.positions) == 3 * VIRTUAL_NODES_PER_WORKER
        assert sorted(ring.workers.count(w) for w in range(3)) == [VIRTUAL_NODES_PER_WORKER] * 3
        for key in ("session-1", "session-2", "request-7"):
            pos = ring_position(key.encode())
            after = [w for p, w in zip(ring.positions, ring.workers) if p >= pos]
            assert ring.pick(key) == (after[0] if after else ring.workers[0])  # wraps past the last node

    def test_a_key_past_the_last_node_wraps_to_the_first(self):
        ring = HashRing(["a", "b"])
        ring.positions, ring.workers = [10, 20], [1, 0]
        key = next(k for k in (f"k{i}" for i in range(100)) if ring_position(k.encode()) > 20)
        assert bisect.bisect_left(ring.positions, ring_position(key.encode())) == 2
        assert ring.pick(key) == 1

    def test_the_same_key_always_picks_the_same_worker_and_keys_spread(self):
        ring = HashRing(dp_aware_urls(1, 8))
        picks = [ring.pick(routing_key(s, 0)) for s in range(400)]
        assert picks == [ring.pick(routing_key(s, 99)) for s in range(400)]  # the session decides, not the request
        assert len(set(picks)) == 8

    def test_a_request_without_a_session_is_keyed_by_its_id(self):
        assert routing_key(-1, 5) == "request-5" and routing_key(3, 5) == "session-3"

    def test_dp_aware_registers_each_rank_as_a_worker_in_rank_order(self):
        assert dp_aware_urls(2, 2) == ["http://server-0:30000@0", "http://server-0:30000@1",
                                       "http://server-1:30000@0", "http://server-1:30000@1"]  # fmt: skip


def dp_multiturn(router: str):
    return scenario_from_dict({
        "name": "ch", "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 0.5, "tp_size": 4, "dp_size": 4, "enable_dp_attention": True},
        "hicache": {"enabled": True, "hicache_ratio": 2.0},
        "cluster": {"router": router},
        "workload": {"kind": "multi_turn", "num_clients": 8, "max_parallel": 8, "request_length": 512,
                     "output_length": 4, "num_rounds": 3},
    }, source="test")  # fmt: skip


class TestOnADPServer:
    def test_a_sessions_calls_stay_on_one_rank_and_hit_its_prefix(self):
        hashed = run_scenario(dp_multiturn("consistent_hashing")).requests
        ranks = hashed.groupby("session")["instance"].nunique()
        assert (ranks == 1).all() and hashed["instance"].nunique() > 1
        ring = HashRing(dp_aware_urls(1, 4))
        assert all(hashed.loc[hashed["session"] == s, "instance"].iloc[0] == ring.pick(routing_key(s, 0))
                   for s in hashed["session"].unique())  # fmt: skip
        rr = run_scenario(dp_multiturn("round_robin")).requests
        assert (rr.groupby("session")["instance"].nunique() > 1).any()  # round robin scatters them
        later = hashed["round"] > 0
        assert hashed.loc[later, "device_hit_tokens"].sum() > rr.loc[rr["round"] > 0, "device_hit_tokens"].sum()
