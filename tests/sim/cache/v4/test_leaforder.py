import random

from sim.cache.v4.leaforder import LeafOrder
from sim.cache.v4.node import UNode


def _node(i: int, t: float) -> UNode:
    n = UNode([("k", i)], None, i, t, 256)
    n.lock = 0
    return n


def _is_leaf(n: UNode) -> bool:
    return n.lock == 0


def test_pops_leaves_by_time_then_id_whichever_side_they_were_filed_on():
    order = LeafOrder()
    a, b, c, d = _node(0, 5.0), _node(1, 7.0), _node(2, 3.0), _node(3, 7.0)  # c out of order, d ties b on time
    for n in (a, b, c, d):
        order.file(n, n.last_access)
    assert len(order.heap) == 1  # only c arrived out of order
    assert [order.pop(_is_leaf) for _ in range(5)] == [c, a, b, d, None]


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


def test_a_refreshed_node_moves_and_its_old_entry_is_dropped():
    order = LeafOrder()
    a, b = _node(0, 1.0), _node(1, 2.0)
    order.file(a, 1.0)
    order.file(b, 2.0)
    a.last_access = 3.0
    order.file(a, 3.0)
    assert len(order) == 2  # moved, not duplicated
    assert [order.pop(_is_leaf), order.pop(_is_leaf), order.pop(_is_leaf)] == [b, a, None]


def test_matches_a_sorted_reference_over_random_files_locks_and_pops():
    rng = random.Random(7)
    nodes = [_node(i, 0.0) for i in range(40)]
    order, clock = LeafOrder(), 0.0
    for _ in range(3000):
        n = rng.choice(nodes)
        op = rng.random()
        if op < 0.4:  # a node's time only grows, but not always to the newest (a match's ancestors, a split)
            clock += 1
            n.last_access = clock if rng.random() < 0.7 else rng.uniform(n.last_access, clock)
        elif op < 0.6:
            n.lock = 1 - n.lock
        elif op < 0.8:
            want = min(((x.last_access, x.id) for x in nodes if _is_leaf(x)), default=None)
            got = order.pop(_is_leaf)
            assert (got.last_access, got.id) == want if got is not None else want is None
            if got is not None:
                got.lock = 1  # evicted: no leaf until it comes back
            continue
        for x in nodes:  # every leaf is filed at its time, as the tree's update_leaf does
            if _is_leaf(x):
                order.file(x, x.last_access)
    order.compact(_is_leaf)
    assert len(order) == sum(_is_leaf(x) for x in nodes)
