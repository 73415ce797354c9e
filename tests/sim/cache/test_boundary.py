"""The boundary write policy (SGLang's policy simulator, boundary_l1_l2), and the invariants every
write and eviction policy keeps.

Keys are page ids (one int per page) on a single-pool model with one-token pages, so token counts equal
page counts; each request is served with input_len = pages + 1, so its whole key can be matched.
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cache.eviction import EVICTION_POLICIES
from sim.cache.hicache import HiCache, WritePolicy
from sim.model.pools import get_model
from sim.offline.replay import duplicate_pages, replay
from sim.workload.traces import read_mooncake

GENERIC = get_model("generic", page_size=1, bytes_per_token=100)
TRACE = Path(__file__).resolve().parents[3] / "data" / "mooncake_conversation_trace.jsonl"


def cache(l1, l2, policy="boundary", **kw):
    return HiCache(GENERIC, l1_pages=l1, l2_pages=l2, policy=policy, load_back_threshold=1, **kw)


def serve(c, keys):
    return c.serve(list(keys), len(keys) + 1)


def node_at(c, keys):
    """The node whose key ends exactly at ``keys``."""
    node, pos = c.tree.root, 0
    while pos < len(keys):
        node = node.children[keys[pos]]
        pos += len(node.key)
    assert pos == len(keys)
    return node


def tiers(node) -> str:
    return ("D" if node.device else "") + ("H" if node.host else "")


class TestTouch:
    def test_the_whole_path_gets_host_copies_at_once(self):
        c = cache(10, 10)
        serve(c, [1, 2, 3])
        serve(c, [1, 2, 3, 4, 5])
        assert tiers(node_at(c, [1, 2, 3])) == tiers(node_at(c, [1, 2, 3, 4, 5])) == "DH"
        assert c.l2.kv_used == 5 and c.stats.host_alloc_failures == 0

    def test_a_path_larger_than_l2_gets_nothing_and_counts_one_failure(self):
        c = cache(10, 3)
        serve(c, [1, 2, 3, 4])
        assert tiers(node_at(c, [1, 2, 3, 4])) == "D"
        assert c.l2.kv_used == 0 and c.stats.host_alloc_failures == 1

    def test_l2_room_comes_from_duplicates_before_host_only_pages(self):
        """A leaves L1 (demoted, host-only); C's host copy then takes B's duplicate, not A, so A stays in
        L2. Write-through would evict A, the only host-only leaf."""
        hits = {}
        for policy in ("boundary", "write_through"):
            c = cache(4, 4, policy)
            serve(c, [1, 2])  # A
            serve(c, [3, 4])  # B
            serve(c, [5, 6])  # C: evicts A from L1
            if policy == "boundary":
                assert [tiers(node_at(c, k)) for k in ([1, 2], [3, 4], [5, 6])] == ["H", "D", "DH"]
                assert c.stats.dedup_evictions == 1
            hits[policy] = serve(c, [1, 2]).host_tokens
        assert hits == {"boundary": 2, "write_through": 0}


class TestDeviceEviction:
    def test_a_demotion_gives_the_bare_parent_a_host_copy_first(self):
        """G=[1..4] -> P=[5] -> V=[6], all device-only (their paths were larger than L2). Evicting V
        reserves P and V (2 pages): V becomes host-only under P, which is now on both tiers."""
        c = cache(10, 3)
        serve(c, [1, 2, 3, 4, 5])
        serve(c, [1, 2, 3, 4, 5, 6])
        serve(c, [1, 2, 3, 4, 7])  # splits [1..5] into G and P
        assert c.stats.host_alloc_failures == 3 and c.l2.kv_used == 0
        serve(c, [20, 21, 22, 23])  # needs 4 L1 pages, 3 are free: V goes
        assert [tiers(node_at(c, k)) for k in ([1, 2, 3, 4], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6])] == ["D", "DH", "H"]
        assert c.stats.demotions == 1

    def test_a_device_only_page_that_l2_cannot_take_is_deleted(self):
        c = cache(4, 3)
        serve(c, [1, 2, 3])  # D+H, fills L2
        serve(c, [1, 2, 3, 9])  # [9]: its 1 page does not fit beside the protected path
        assert tiers(node_at(c, [1, 2, 3, 9])) == "D"
        serve(c, [7])  # evicts [9]; its only possible victim is its own parent's host copy: kept
        assert 9 not in node_at(c, [1, 2, 3]).children
        assert c.stats.host_alloc_failures == 2 and c.stats.demotions == 0
        # then [7]'s own host copy takes that duplicate, now a leaf and no longer protected
        assert [tiers(node_at(c, k)) for k in ([1, 2, 3], [7])] == ["D", "DH"]
        assert c.stats.dedup_evictions == 1


def check_invariants(c: HiCache) -> None:
    """Capacity, page accounting, and host copies reachable: every node is on a tier, a host-only
    node's parent is the root or has a host copy (strictly prefix-closed host copies for the
    write-through policies, which back up ancestors first). write_back backs up each device victim
    alone and reclaims host copies of device-resident nodes (unified_tree_core.py:1975-2030, 2622-2644),
    so there a host node's parent is on the host or on the device."""
    root = c.tree.root
    dev = host = 0
    for n in c.tree.nodes():
        assert n.device or n.host, n
        if n.device:
            dev += len(n.key)
            assert n.parent is root or n.parent.device
        if n.host:
            host += len(n.key)
            if c.policy is WritePolicy.WRITE_BACK:
                assert n.parent is root or n.parent.host or n.parent.device, n
            elif not n.device or c.policy is not WritePolicy.BOUNDARY:
                assert n.parent is root or n.parent.host, n
    assert dev == c.l1.kv_used <= c.l1.kv_cap
    assert host == c.l2.kv_used <= c.l2.kv_cap


requests = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    reqs=requests,
    l1=st.integers(6, 14),
    l2=st.integers(1, 20),
    policy=st.sampled_from([p.value for p in WritePolicy]),
    eviction=st.sampled_from(EVICTION_POLICIES),
)
def test_every_policy_keeps_host_copies_reachable_and_within_capacity(reqs, l1, l2, policy, eviction):
    c = cache(l1, l2, policy, eviction_policy=eviction)
    for r in reqs:
        serve(c, r)
        check_invariants(c)


@pytest.fixture(scope="module")
def conversation():
    return read_mooncake(TRACE, block_size=512, max_requests=4000)


def test_on_a_mooncake_trace_boundary_keeps_l1_and_adds_l2_hits(conversation):
    """L1 evolves alike under both policies (SGLang's simulator: identical; here within 0.1 point, as
    loaded-back pages keep their node boundaries); boundary holds far fewer duplicates and hits more in L2."""
    out = {}
    model = get_model("generic")
    for policy in ("write_through", "boundary"):
        c = HiCache(model, l1_pages=1000, l2_pages=2000, policy=policy, page_tokens=512)
        s = replay(c, conversation).summary()
        out[policy] = (s["l1_hit_pages"], s["l1l2_hit_pages"], duplicate_pages(c))
        check_invariants(c)
    (wt_l1, wt_l12, wt_dup), (b_l1, b_l12, b_dup) = out["write_through"], out["boundary"]
    assert abs(wt_l1 - b_l1) < 0.001
    assert b_l12 > wt_l12 + 0.01
    assert b_dup < wt_dup / 2


def test_the_timed_engine_runs_boundary_with_any_eviction_order():
    """Every request finishes, backups are flushed and acked, and the caches keep the invariants."""
    from sim.app.run import run_scenario
    from sim.scenario.load import scenario_from_dict

    # The generic model: V4's exact cache has no boundary policy (tests/sim/app/test_run.py checks it is refused).
    base = {"name": "t", "seed": 3, "model": {"name": "generic", "generic_bytes_per_token": 35136},
            "hardware": {"kv_mem_gb": 0.08},
            "hicache": {"enabled": True, "hicache_ratio": 1.0, "write_policy": "boundary",
                        "radix_eviction_policy": "slru"},
            "workload": {"kind": "multi_turn", "num_clients": 24, "max_parallel": 8, "request_length": 512,
                         "output_length": 16, "num_rounds": 3, "request_rate": None}}  # fmt: skip
    result = run_scenario(scenario_from_dict(base, source="test"))
    req = result.summary["requests"]
    assert req["finished"] == 24 * 3
    assert result.summary["link_bytes"]["d2h"] > 0
    for inst in result.sim.instances:
        assert inst.cache.eviction_policy == "slru"
        assert not inst.cache.pending and inst.cache.stats.demotions > 0
        check_invariants(inst.cache)
