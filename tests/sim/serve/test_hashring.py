"""The router's DP-aware consistent hashing: a session keeps its rank, sessions spread over the ranks, and the
router's pick goes past the DP controller (sglang/srt/managers/data_parallel_controller.py:865-879)."""

from collections import Counter
from pathlib import Path

from sim.app.run import run_scenario
from sim.app.scenario import scenario_from_dict
from sim.serve.hashring import HashRing

DATA = Path(__file__).resolve().parents[3] / "data" / "agentic"


def test_a_session_keeps_its_node_and_sessions_spread_over_every_node():
    ring = HashRing(8)
    assert all(ring.node(s, rid) == ring.node(s, 0) for s in range(50) for rid in range(5))
    counts = Counter(ring.node(s, 0) for s in range(4000))
    assert set(counts) == set(range(8)) and max(counts.values()) < 1.3 * 500 and min(counts.values()) > 0.7 * 500
    assert len({ring.node(-1, rid) for rid in range(100)}) == 8  # no session: each request on its own


def test_adding_a_node_moves_only_the_sessions_it_takes():
    before, after = HashRing(8), HashRing(9)
    moved = [s for s in range(3000) if before.node(s, 0) != after.node(s, 0)]
    assert all(after.node(s, 0) == 8 for s in moved) and len(moved) < 3000 / 9 * 1.4


def lanes_on_dp8(router: str):
    sc = scenario_from_dict({
        "name": "dp8", "seed": 1, "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 1.0, "tp_size": 8, "dp_size": 8, "enable_dp_attention": True},
        "cluster": {"router": router}, "hicache": {"enabled": False},
        "workload": {"kind": "lanes", "path": str(DATA / "weka_synthetic.jsonl"), "lanes": 8, "benchmark_duration_s": 60},
    }, source="test")  # fmt: skip
    result = run_scenario(sc)
    return result.summary["client"], result.requests


def test_on_a_dp8_server_each_session_stays_on_one_rank_and_finds_its_prefix_there():
    hashed, df = lanes_on_dp8("consistent_hash")
    assert (df.groupby("session")["instance"].nunique() == 1).all() and df["instance"].nunique() > 2
    spread, rr = lanes_on_dp8("round_robin")
    assert (rr.groupby("session")["instance"].nunique() > 1).any()  # the DP controller's round robin scatters
    assert hashed["gpu_hit"] > spread["gpu_hit"] + 0.2
