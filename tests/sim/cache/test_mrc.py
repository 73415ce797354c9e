"""The one-pass LRU hit-rate curve: exact for page-granular LRU at every capacity, and for SGLang's tree
wherever its evictions are page-exact; a sandwich elsewhere; not claimed for V4's SWA tree."""

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cache.hicache import HiCache
from sim.cache.mrc import applies_to, miss_ratio_curve
from sim.model.pools import get_model
from sim.workload.request import Request

GENERIC = get_model("generic", page_size=1, bytes_per_token=100)


def page_lru(requests, capacity):
    """Page-granular LRU, the reference: a request hits the leading pages of its capped prefix that are
    held, then touches its whole path (deepest first, so a deeper page is older); the oldest pages go."""
    held: OrderedDict = OrderedDict()  # oldest first
    hits = 0
    for r in requests:
        prefixes = [tuple(r.keys[: i + 1]) for i in range(len(r.keys))]
        for p in prefixes[: max(0, r.input_len - 1)]:
            if p not in held:
                break
            hits += 1
        for p in reversed(prefixes):
            held.pop(p, None)
            held[p] = True
        while len(held) > capacity:
            held.popitem(last=False)
    return hits, held


def device_pages(tree) -> set:
    out = set()

    def walk(node, prefix):
        for child in node.children.values():
            path = prefix + tuple(child.key)
            if child.device:
                out.update(path[: len(prefix) + j + 1] for j in range(len(child.key)))
            walk(child, path)

    walk(tree.root, ())
    return out


def tree_replay(requests, capacity):
    """SGLang's single-pool tree, L2 off, LRU, in request order: (hit pages, whether after every request it
    held exactly what page LRU holds, the min(C, pages seen) most recent pages of the reference order)."""
    cache = HiCache(GENERIC, l1_pages=capacity, l2_pages=0, load_back_threshold=1)
    exact = True
    for i, r in enumerate(requests):
        cache.serve(r.keys, r.input_len)
        exact = exact and device_pages(cache.tree) == set(page_lru(requests[: i + 1], capacity)[1])
    return cache.stats.cached_pages["device"], exact


paths = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=40)
pad = st.lists(st.booleans(), min_size=40, max_size=40)


def make(paths, pad):
    """input_len one past the pages (match cap = every page) or exactly the pages (cap = all but the last)."""
    return [Request(i, 0.0, len(p) + (1 if pad[i] else 0), 1, list(p)) for i, p in enumerate(paths)]


@settings(max_examples=150, deadline=None)
@given(paths=paths, pad=pad)
def test_the_one_pass_curve_equals_page_lru_replays_at_every_capacity(paths, pad):
    requests = make(paths, pad)
    curve = miss_ratio_curve(requests, 1)
    for capacity in range(1, curve.distinct_pages + 2):
        assert curve.hit_pages(capacity) == page_lru(requests, capacity)[0]
    assert curve.hit_pages(None) == page_lru(requests, 10**9)[0]


@settings(max_examples=200, deadline=None)
@given(paths=paths, pad=pad, extra=st.integers(0, 12))
def test_the_tree_equals_the_curve_wherever_it_keeps_page_lrus_pages(paths, pad, extra):
    requests = make(paths, pad)
    capacity = max(len(p) for p in paths) + extra  # every request fits: no device-full refusals
    hits, exact = tree_replay(requests, capacity)
    if exact:
        assert hits == miss_ratio_curve(requests, 1).hit_pages(capacity)


def test_most_random_traces_that_evict_keep_page_lrus_pages_on_the_tree():
    """The equality above is not vacuous: over seeded random six-request traces that do evict, the tree keeps
    page LRU's pages in about one case in ten (the others meet one of the three deviations below; longer
    traces meet one almost always)."""
    import random

    rnd = random.Random(7)
    evicting = exact = 0
    for _ in range(200):
        paths = [[rnd.randrange(3) for _ in range(rnd.randint(1, 4))] for _ in range(6)]
        requests = make(paths, [True] * 40)
        curve = miss_ratio_curve(requests, 1)
        for capacity in (4, 6):
            if capacity >= curve.distinct_pages:
                continue
            evicting += 1
            hits, same = tree_replay(requests, capacity)
            exact += same
            if same:
                assert hits == curve.hit_pages(capacity)
    assert evicting > 300 and exact >= 30


def r(i, keys, input_len):
    return Request(i, 0.0, input_len, 1, keys)


class TestWhereTheTreeDepartsFromPageLRU:
    def test_whole_leaf_eviction(self):
        """C = 2: [a1 a2] then [b1] evicts the whole two-page leaf (page LRU keeps a1), so [a1 a2] again
        hits nothing on the tree and one page under page LRU."""
        requests = [r(0, [1, 2], 3), r(1, [3], 2), r(2, [1, 2], 3)]
        assert miss_ratio_curve(requests, 1).hit_pages(2) == 1
        assert tree_replay(requests, 2) == (0, False)

    def test_a_match_that_stops_inside_a_node_refreshes_the_nodes_tail(self):
        """SGLang stamps a node before splitting it, so [0] matched inside the leaf [0 0 0] refreshes the two
        pages after it: the older leaf [1 0 0] goes instead of page LRU's victim (0 0 0)."""
        requests = [r(0, [0, 0, 0], 3), r(1, [1, 0, 0], 3), r(2, [0, 0], 2)]
        hits, exact = tree_replay(requests, 6)
        assert not exact

    def test_the_capped_last_page_is_reserved_again(self):
        """input_len == pages: the match stops one page short, the request reserves room for that page
        although it is cached, and one page more than needed is evicted."""
        requests = [r(0, [1], 2), r(1, [2], 2), r(2, [2], 1)]
        hits, exact = tree_replay(requests, 2)
        assert not exact


def test_v4_models_are_told_to_replay():
    ok, why = applies_to(get_model("deepseek-v4-flash"))
    assert not ok and "SWA" in why
    assert applies_to(GENERIC) == (True, "")


def test_on_the_bundled_conversation_trace_the_curve_is_within_a_quarter_point_of_replays():
    """The deviations are rare at scale: 12,031 requests, 512-token pages, five capacities."""
    from pathlib import Path

    from sim.workload.traces import read_trace

    trace = Path(__file__).resolve().parents[3] / "data" / "mooncake_conversation_trace.jsonl"
    requests = read_trace(trace, fmt="mooncake", block_size=512, page_size=512)
    curve = miss_ratio_curve(requests, 512)
    model = get_model("generic")
    for capacity in (1000, 6000, 24000):
        cache = HiCache(model, l1_pages=capacity, l2_pages=0, page_tokens=512)
        for q in requests:
            cache.serve(q.keys, q.input_len)
        replayed = cache.stats.cached_tokens["device"] / curve.input_tokens
        assert abs(curve.hit_rate(capacity) - replayed) < 0.0025
