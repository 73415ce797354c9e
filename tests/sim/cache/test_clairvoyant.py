"""The clairvoyant bound: Belady's rule on prefix-closed pages, never beaten by a real policy."""

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cache.clairvoyant import PageTrace, clairvoyant
from sim.cache.eviction import EVICTION_POLICIES
from sim.cache.hicache import HiCache, WritePolicy
from sim.model.pools import get_model
from sim.offline.replay import bound_capacities
from sim.workload.request import Request

GENERIC = get_model("generic", page_size=1, bytes_per_token=100)


def reqs(*paths, input_len=None) -> list[Request]:
    return [Request(i, 0.0, input_len or len(p) + 1, 1, list(p)) for i, p in enumerate(paths)]


def lru_hits(requests, l1, l2=0, policy="write_through", eviction="lru"):
    c = HiCache(GENERIC, l1_pages=l1, l2_pages=l2, policy=policy, eviction_policy=eviction, load_back_threshold=1)
    for r in requests:
        c.serve(r.keys, r.input_len)
    return c.stats


class TestHandCases:
    def test_it_keeps_the_page_needed_again_and_drops_the_one_that_is_not(self):
        trace = reqs([1], [2], [1])
        assert clairvoyant(trace, [1], 1)[0].hit_pages == 1  # keeps [1] over [2]
        assert lru_hits(trace, 1).cached_pages["device"] == 0  # LRU drops [1]

    def test_a_shared_prefix_is_counted_once_per_page_and_by_its_path(self):
        """Page 5 under 1 and page 5 under 2 are different pages (different prefixes)."""
        trace = reqs([1, 5], [2, 5], [1, 5])
        b = PageTrace(trace, 1)
        assert b.bound(None).hit_pages == 2
        assert b.bound(2).hit_pages == 2

    def test_hits_stop_at_the_match_cap(self):
        trace = reqs([1, 2, 3], [1, 2, 3], input_len=3)  # cap: 2 pages
        b = clairvoyant(trace, [None], 1)[0]
        assert (b.hit_pages, b.input_pages, b.hit_tokens, b.input_tokens) == (2, 6, 2, 6)

    def test_unbounded_counts_every_repeat(self):
        trace = reqs([1, 2], [1, 2], [1, 3])
        assert clairvoyant(trace, [None], 1)[0].hit_rate("pages") == 3 / 6


paths = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=7), min_size=1, max_size=50)


@settings(max_examples=80, deadline=None)
@given(paths=paths, l1=st.integers(1, 12), l2=st.integers(0, 12),
       policy=st.sampled_from([p.value for p in WritePolicy]), eviction=st.sampled_from(EVICTION_POLICIES))  # fmt: skip
def test_no_policy_beats_the_bound_at_l1_or_at_l1_plus_l2(paths, l1, l2, policy, eviction):
    trace = reqs(*paths)
    s = lru_hits(trace, l1, l2, policy, eviction)
    c = HiCache(GENERIC, l1_pages=l1, l2_pages=l2)
    bounds = PageTrace(trace, 1)
    b = [bounds.bound(cap) for cap in bound_capacities(c)]
    assert s.cached_pages["device"] <= b[0].hit_pages
    assert s.cached_pages["device"] + s.cached_pages["host"] <= b[-1].hit_pages


@settings(max_examples=60, deadline=None)
@given(paths=paths, l1=st.integers(1, 12))
def test_the_bound_grows_with_capacity_and_stops_at_the_unbounded_count(paths, l1):
    b = PageTrace(reqs(*paths), 1)
    small, large, unbounded = b.bound(l1), b.bound(l1 + 3), b.bound(None)
    assert small.hit_pages <= large.hit_pages <= unbounded.hit_pages
    assert lru_hits(reqs(*paths), 10_000).cached_pages["device"] == unbounded.hit_pages
