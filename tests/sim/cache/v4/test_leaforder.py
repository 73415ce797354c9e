import random

import pytest

from sim.cache.v4.leaforder import RUNS, LeafOrder
from sim.cache.v4.node import UNode


def _node(i: int, t: float) -> UNode:
    n = UNode([("k", i)], None, i, t, 256)
    n.lock = 0
    return n


def _is_leaf(n: UNode) -> bool:
    return n.lock == 0


def _key(n: UNode) -> tuple[float, int]:
    return n.last_access, n.id


def test_pops_leaves_by_time_then_id_whichever_run_or_heap_they_were_filed_in():
    order = LeafOrder()
    # c out of order, d ties b on time
    a, b, c, d = _node(0, 5.0), _node(1, 7.0), _node(2, 3.0), _node(3, 7.0)
    for n in (a, b, c, d):
        order.file(n, n.last_access)
    assert not order.heap  # c opened a second run
    assert [order.pop(_is_leaf) for _ in range(5)] == [c, a, b, d, None]


def test_only_a_key_below_every_runs_tail_goes_to_the_heap():
    order = LeafOrder()
    tails = [_node(i, 10.0 * (RUNS - i)) for i in range(RUNS)]  # decreasing: each opens a run
    for n in tails:
        order.file(n, n.last_access)
    assert not order.heap
    low, mid = _node(RUNS, 1.0), _node(RUNS + 1, 15.0)
    order.file(mid, mid.last_access)  # above the smallest tails: appended to the run that ends at 10
    assert not order.heap
    order.file(low, low.last_access)
    assert [e[2] for e in order.heap] == [low]
    assert [order.pop(_is_leaf) for _ in range(RUNS + 2)] == sorted([*tails, low, mid], key=_key)


def test_interleaved_monotone_streams_up_to_runs_never_touch_the_heap():
    """A key below every tail would end a decreasing chain of RUNS + 1 keys (each run's tail was filed below
    the previous run's), and RUNS increasing streams hold no such chain."""
    rng = random.Random(3)
    ids = iter(range(10**6))
    clocks = [rng.uniform(0, 100) for _ in range(RUNS)]  # each stream's times only grow
    order, filed = LeafOrder(), []
    for _ in range(5000):
        if rng.random() < 0.7:
            s = rng.randrange(RUNS)
            clocks[s] += rng.choice((0.0, rng.uniform(0, 3)))  # ties on time: ordered by id
            n = _node(next(ids), clocks[s])
            order.file(n, n.last_access)
            filed.append(n)
        else:
            got = order.pop(_is_leaf)
            want = min(filed, key=_key, default=None)
            assert got is want
            if want is not None:
                filed.remove(want)
        assert not order.heap
    assert [order.pop(_is_leaf) for _ in range(len(filed) + 1)] == [*sorted(filed, key=_key), None]


def test_a_locked_node_is_skipped_and_keeps_its_place_when_unlocked_with_its_time():
    order = LeafOrder()
    a, b = _node(0, 1.0), _node(1, 2.0)
    order.file(a, 1.0)
    order.file(b, 2.0)
    a.lock = 1
    order.file(a, 1.0)  # filed again at the same time: nothing new
    assert len(order) == 2
    a.lock = 0
    assert order.pop(_is_leaf) is a


def test_a_refreshed_node_pops_at_its_new_time_and_its_old_entry_is_dropped_when_it_surfaces():
    order = LeafOrder()
    a, b = _node(0, 1.0), _node(1, 2.0)
    order.file(a, 1.0)
    order.file(b, 2.0)
    a.last_access = 3.0
    order.file(a, 3.0)
    assert len(order) == 3  # the old entry stays, dead, until it surfaces
    assert [order.pop(_is_leaf), order.pop(_is_leaf), order.pop(_is_leaf)] == [b, a, None]
    assert len(order) == 0 and not order.mark


def test_a_pop_clears_the_dead_heads_of_every_run_not_only_the_smallest():
    order = LeafOrder()
    old, young = _node(0, 1.0), _node(1, 5.0)
    gone = _node(2, 0.5)  # below both tails once they are filed: the head of a second run
    for n in (old, young, gone):
        order.file(n, n.last_access)
    gone.lock = 1  # it left the leaves: its entry is dead
    order.file(_node(3, 0.7), 0.7)  # the head of a third run, smaller than old
    assert len(order) == 4
    order.pop(_is_leaf)
    assert gone not in order.mark and len(order) == 2  # the popped head and gone's dead one went


def test_a_node_refreshed_again_and_again_leaves_no_more_dead_entries_than_live_ones():
    order = LeafOrder()
    anchor = _node(0, 0.0)  # the oldest, never popped: the refreshed node's old entries never surface
    order.file(anchor, 0.0)
    hot = _node(1, 1.0)
    for t in range(1, 20_000):
        hot.last_access = float(t)
        order.file(hot, hot.last_access)
    assert len(order) <= 2 * (2 + 1024)  # superseded entries pruned once past half of all (+ 1024)
    assert [order.pop(_is_leaf), order.pop(_is_leaf), order.pop(_is_leaf)] == [anchor, hot, None]


def test_compact_keeps_one_entry_per_live_leaf_in_order():
    order = LeafOrder()
    nodes = [_node(i, float(i % 7)) for i in range(30)]
    for n in nodes:
        order.file(n, n.last_access)
    for n in nodes[::3]:  # refreshed: a dead entry left behind
        n.last_access += 10
        order.file(n, n.last_access)
    for n in nodes[1::5]:
        n.lock = 1
    order.compact(_is_leaf)
    live = sorted((n for n in nodes if _is_leaf(n)), key=_key)
    assert len(order) == len(live) and order.mark == {n: n.last_access for n in live}
    assert [order.pop(_is_leaf) for _ in range(len(live) + 1)] == [*live, None]


@pytest.mark.parametrize("seed", range(40))
def test_matches_a_sorted_reference_over_interleaved_streams_random_keys_locks_and_pops(seed):
    """The tree's order sees a few interleaved, nearly monotone streams (fresh matches at the clock, nodes
    unlocked or left leaves with their old times, in the order they were locked) and a few keys anywhere; every
    leaf is filed whenever it becomes one or its time changes, as ``update_leaf`` does. Each pop must be the
    smallest ``(last_access, id)`` over the leaves, whatever the mix."""
    rng = random.Random(seed)
    nodes = [_node(i, 0.0) for i in range(rng.choice((8, 40, 200)))]
    order, clock = LeafOrder(), 0.0
    held: list[list[UNode]] = [[], [], []]  # locked nodes, each list released oldest first (a stream)
    weights = [rng.random() for _ in range(6)]

    def file(n: UNode) -> None:
        if _is_leaf(n):
            order.file(n, n.last_access)

    for n in nodes:
        file(n)
    for _ in range(3000):
        op = rng.choices(range(6), weights)[0]
        n = rng.choice(nodes)
        if op == 0:  # refreshed by a match: the newest time
            clock += rng.choice((0.0, 1.0))  # ties on time: ordered by id
            n.last_access = max(clock, n.last_access)
            file(n)
        elif op == 1:  # a time between its own and the clock (a match's ancestors, a split)
            clock += 1
            n.last_access = rng.uniform(n.last_access, clock)
            file(n)
        elif op == 2 and _is_leaf(n):  # locked (or given a child): stops being a leaf, keeps its entry
            n.lock = 1
            rng.choice(held).append(n)
        elif op == 3:  # unlocked with its old time: a stream in the order the nodes were locked
            stream = rng.choice(held)
            if stream:
                m = stream.pop(0)
                m.lock = 0
                file(m)
        elif op == 4:
            want = min((_key(x) for x in nodes if _is_leaf(x)), default=None)
            got = order.pop(_is_leaf)
            assert (_key(got) if got is not None else None) == want
            if got is not None:  # evicted: no leaf until a stream brings it back with its time
                got.lock = 1
                rng.choice(held).append(got)
        elif op == 5:
            file(n)  # filed again at its time: nothing new
            if rng.random() < 0.02:
                order.compact(_is_leaf)
                assert len(order) == sum(_is_leaf(x) for x in nodes)
    live = sorted((x for x in nodes if _is_leaf(x)), key=_key)
    assert [order.pop(_is_leaf) for _ in range(len(live) + 1)] == [*live, None]
