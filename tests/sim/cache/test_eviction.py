"""Device eviction orders other than LRU (SGLang's --radix-eviction-policy), on small hand cases.

Each case caches three one-page leaves under the root, with hit counts and access times chosen so that
the policies disagree, then evicts one page at a time.
"""

import pytest

from sim.base.errors import InputError
from sim.cache.eviction import EVICTION_POLICIES, eviction_order
from sim.cache.hicache import HiCache
from sim.cache.radix import RadixTree
from sim.model.pools import get_model

GENERIC = get_model("generic", page_size=1, bytes_per_token=100)


def tree_with(policy: str, config=None) -> RadixTree:
    """Leaves a (inserted twice: hit count 2), then b, then c (hit count 1 each); a is the least recent."""
    t = RadixTree()
    t.use_eviction_order(eviction_order(policy, config))
    t.insert(["a"])
    t.insert(["a"])
    t.insert(["b"])
    t.insert(["c"])
    return t


def eviction_sequence(t: RadixTree) -> list[str]:
    out = []
    while t.device_tokens():
        before = {p[0] for p in t.paths()}
        t.evict(1)
        out += sorted(before - {p[0] for p in t.paths()})
    return out


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("lru", ["a", "b", "c"]),  # least recent first
        ("lfu", ["b", "c", "a"]),  # fewest hits first, then least recent
        ("slru", ["b", "c", "a"]),  # probationary (< 2 hits) before protected, LRU within a segment
        ("fifo", ["a", "b", "c"]),  # oldest created first
        ("filo", ["c", "b", "a"]),  # newest created first
        ("mru", ["c", "b", "a"]),  # most recent first
    ],
)
def test_each_policy_evicts_in_its_documented_order(policy, expected):
    assert eviction_sequence(tree_with(policy)) == expected


def test_slru_with_a_higher_threshold_is_plain_lru_until_a_node_reaches_it():
    assert eviction_sequence(tree_with("slru", {"protected_threshold": 3})) == ["a", "b", "c"]


def test_a_config_key_the_policy_does_not_take_is_an_error_naming_both():
    with pytest.raises(InputError, match="lfu takes no parameter 'protected_threshold'"):
        eviction_order("lfu", {"protected_threshold": 3})
    with pytest.raises(InputError, match="slru takes no parameter 'threshold'"):
        eviction_order("slru", {"threshold": 3})
    with pytest.raises(InputError, match="integer >= 1"):
        eviction_order("slru", {"protected_threshold": 0})


def test_a_hit_after_filing_counts_in_lfu():
    """b's hit count rises after it was filed; LFU must see the new count (lazy re-filing)."""
    t = tree_with("lfu")
    t.insert(["b"])
    t.insert(["b"])  # b: 3 hits, the most recent
    t.match(["a"])  # a: 2 hits, now more recent than c
    assert eviction_sequence(t) == ["c", "a", "b"]


def test_a_locked_leaf_is_never_a_victim_in_any_order():
    for policy in EVICTION_POLICIES:
        t = tree_with(policy)
        m = t.match(["b"])
        t.lock(m.device_node)
        t.evict(10)
        assert t.paths() == [["b"]], policy


def test_the_order_is_chosen_on_an_empty_tree_only():
    t = RadixTree()
    t.insert([1])
    with pytest.raises(RuntimeError):
        t.use_eviction_order(eviction_order("lfu"))


def test_unknown_policies_are_reported_with_the_known_ones():
    with pytest.raises(InputError, match="lfu"):
        eviction_order("random")
    with pytest.raises(InputError, match="lfu"):
        HiCache(GENERIC, l1_pages=10, eviction_policy="arc")


def test_lfu_keeps_a_popular_prefix_that_lru_evicts():
    """A prompt used twice up front and then between every two one-off scans survives under LFU only:
    the scans (4 pages each) fill the 9-page L1 before the prompt (2 pages) comes back."""
    hits = {}
    for policy in ("lru", "lfu"):
        c = HiCache(GENERIC, l1_pages=9, l2_pages=0, eviction_policy=policy, load_back_threshold=1)
        c.serve(["sys", "sys2"], 3)
        c.serve(["sys", "sys2"], 3)
        before = c.stats.cached_tokens["device"]
        for i in range(10):
            c.serve(["sys", "sys2"], 3)
            c.serve([f"x{i}", "y", "z", "w"], 5)
            c.serve([f"s{i}", "t", "u", "v"], 5)
        hits[policy] = c.stats.cached_tokens["device"] - before
    assert hits == {"lru": 2, "lfu": 20}  # LRU: only the first use after the warm-up hits


def test_a_scenario_names_the_bad_config_key_and_its_yaml_path():
    from sim.scenario.load import scenario_from_dict

    good = {"name": "t", "hicache": {"radix_eviction_policy": "slru",
                                     "radix_eviction_policy_config": {"protected_threshold": 4}}}  # fmt: skip
    assert scenario_from_dict(good, source="t.yaml").hicache.radix_eviction_policy_config == {"protected_threshold": 4}
    bad = {"name": "t", "hicache": {"radix_eviction_policy": "lfu",
                                    "radix_eviction_policy_config": {"protected_threshold": 4}}}  # fmt: skip
    with pytest.raises(InputError, match="hicache.radix_eviction_policy_config: lfu takes no parameter"):
        scenario_from_dict(bad, source="t.yaml")
