"""The radix tree on its own: residency tiers, splits, locks and LRU orders.

Behaviour the SGLang vectors (``test_radix_vectors.py``) do not reach: they drive a device-only tree. The
residency transitions (``set_host``, ``demote``...) are called here directly, as :mod:`sim.cache.hicache` calls
them. Keys are page ids; with ``page_size`` 1 a page is a token.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cache.radix import RadixTree


def child(tree: RadixTree, *path):
    """The node reached by following first page keys from the root."""
    node = tree.root
    for key in path:
        node = node.children[key]
    return node


def host_only(tree: RadixTree, keys):
    """Insert ``keys`` as a leaf, back it up, and demote it: a host-only node."""
    res = tree.insert(keys)
    leaf = res.path[-1]
    tree.set_host(leaf, mask=1)
    tree.demote(leaf)
    return leaf


def drain_host(tree: RadixTree):
    """Host victims in order, each deleted before the next is asked for (the controller's contract)."""
    order = []
    for node in tree.host_victims():
        order.append(node)
        tree.delete_leaf(node)
    return order


class TestHostOnlyNodes:
    def test_a_demoted_backed_up_leaf_matches_from_host_only(self):
        tree = RadixTree()
        tree.insert([1, 2])
        leaf = host_only(tree, [1, 2, 3, 4])
        m = tree.match([1, 2, 3, 4, 5])
        assert (m.device_pages, m.best_pages) == (2, 4)
        assert m.best_node is leaf and m.device_node is child(tree, 1)
        assert not leaf.device and leaf.host

    def test_demotion_moves_tokens_off_the_device_counters_onto_host(self):
        tree = RadixTree()
        host_only(tree, [1, 2, 3])
        assert tree.device_tokens() == 0 and tree.host_tokens == 3

    def test_insert_revives_a_host_only_node_on_device(self):
        tree = RadixTree()
        leaf = host_only(tree, [1, 2, 3])
        res = tree.insert([1, 2, 3])
        assert res.revived == [leaf] and res.prefix_pages == 3
        assert leaf.device and leaf.host and tree.evictable_tokens == 3

    def test_evict_demotes_a_backed_up_leaf_and_deletes_an_unbacked_one(self):
        tree = RadixTree()
        backed = tree.insert([1, 2]).path[-1]
        tree.set_host(backed, 1)
        tree.insert([5, 6])
        assert tree.evict(4) == (4, 2)
        assert list(tree.root.children) == [1]
        assert backed.host and not backed.device


class TestDeadNodes:
    def test_the_walk_stops_at_a_node_on_neither_tier(self):
        tree = RadixTree()
        tree.insert([1, 2])
        dead = tree.insert([1, 2, 3, 4]).path[-1]
        tree.demote(dead)  # no host copy: neither device nor host
        m = tree.match([1, 2, 3, 4, 5])
        assert (m.device_pages, m.best_pages) == (2, 2)

    def test_a_dead_node_is_revived_by_insert(self):
        tree = RadixTree()
        tree.insert([1, 2])
        dead = tree.insert([1, 2, 3, 4]).path[-1]
        tree.demote(dead)
        assert tree.insert([1, 2, 3, 4]).revived == [dead]
        assert tree.match([1, 2, 3, 4]).device_pages == 4


class TestSplit:
    def test_a_partial_match_splits_at_the_page_boundary(self):
        tree = RadixTree()
        tree.insert([1, 2, 3, 4])
        m = tree.match([1, 2, 9])
        assert m.device_pages == 2
        top = child(tree, 1)
        assert top.key == [1, 2] and list(top.children) == [3] and top.children[3].key == [3, 4]
        assert tree.num_nodes == 3

    def test_the_new_parent_inherits_residency_locks_and_hit_count(self):
        tree = RadixTree()
        tree.insert([1, 2, 3, 4])
        leaf = tree.insert([1, 2, 3, 4]).path[-1]
        tree.lock(leaf)
        tree.host_lock(leaf)
        tree.set_host(leaf, mask=5)
        tree.match([1, 2, 9])
        top = child(tree, 1)
        assert top is not leaf and top.children[3] is leaf
        assert (top.hit_count, top.lock_ref, top.host_lock_ref) == (2, 1, 1)
        assert (top.device, top.host, top.host_mask, top.dev_children) == (True, True, 5, 1)

    def test_a_split_keeps_the_token_counters(self):
        tree = RadixTree()
        leaf = tree.insert([1, 2, 3, 4]).path[-1]
        tree.lock(leaf)
        tree.set_host(leaf, 1)
        tree.match([1, 2, 9])
        assert (tree.evictable_tokens, tree.protected_tokens, tree.host_tokens) == (0, 4, 4)
        tree.unlock(leaf)
        assert (tree.evictable_tokens, tree.protected_tokens) == (4, 0)
        assert child(tree, 1).lock_ref == 0


class TestLocks:
    def test_locking_moves_the_whole_path_from_evictable_to_protected(self):
        tree = RadixTree()
        tree.insert([1, 2, 3, 4])
        tree.insert([1, 2, 5, 6])
        tree.lock(child(tree, 1, 3))
        assert (tree.evictable_tokens, tree.protected_tokens) == (2, 4)

    def test_locks_nest_and_only_the_last_unlock_frees(self):
        tree = RadixTree()
        leaf = tree.insert([1, 2, 3]).path[-1]
        tree.lock(leaf)
        tree.lock(leaf)
        tree.unlock(leaf)
        assert (tree.evictable_tokens, tree.protected_tokens) == (0, 3)
        tree.unlock(leaf)
        assert (tree.evictable_tokens, tree.protected_tokens) == (3, 0)

    def test_unlocking_an_unlocked_node_is_a_bug(self):
        tree = RadixTree()
        leaf = tree.insert([1]).path[-1]
        with pytest.raises(RuntimeError, match="unlock of an unlocked node"):
            tree.unlock(leaf)

    def test_locked_nodes_are_never_evicted(self):
        tree = RadixTree()
        tree.insert([1, 2, 3, 4])
        tree.insert([1, 2, 5, 6])
        tree.lock(child(tree, 1, 3))
        assert tree.evict(100) == (2, 1)
        assert tree.paths() == [[1, 2, 3, 4]]

    def test_a_host_locked_node_is_not_a_host_victim(self):
        tree = RadixTree()
        a, b = host_only(tree, [1]), host_only(tree, [2])
        tree.host_lock(a)
        assert drain_host(tree) == [b]


class TestLruOrder:
    def test_device_eviction_takes_the_least_recently_matched_leaf_first(self):
        tree = RadixTree()
        for k in (1, 2, 3):
            tree.insert([k])
        tree.match([1])
        order = []
        while tree.paths():
            before = tree.paths()
            tree.evict(1)
            order += [p for p in before if p not in tree.paths()]
        assert order == [[2], [3], [1]]

    def test_a_parent_is_evicted_after_its_children(self):
        tree = RadixTree()
        tree.insert([1, 2])
        tree.insert([1, 2, 3])
        tree.insert([5])  # newer than both
        assert tree.evict(1) == (1, 1) and tree.paths() == [[1, 2], [5]]
        assert tree.evict(1) == (2, 1) and tree.paths() == [[5]]

    def test_host_victims_come_least_recently_used_first_and_a_match_refreshes(self):
        tree = RadixTree()
        a, b, c = (host_only(tree, [k]) for k in (1, 2, 3))
        tree.match([1])
        assert drain_host(tree) == [b, c, a]

    def test_a_demoted_childless_node_joins_the_host_order_once_its_child_is_deleted(self):
        tree = RadixTree()
        parent = host_only(tree, [1, 2])
        tree.insert([1, 2, 3])  # revives the parent and adds an unbacked child
        tree.evict(1)  # deletes the child (unbacked) ...
        tree.evict(2)  # ... then demotes the backed-up parent
        assert drain_host(tree) == [parent]


# ----- property test ------------------------------------------------------------------------------
KEYS = st.lists(st.integers(0, 3), min_size=1, max_size=6)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), KEYS),
        st.tuples(st.just("match"), KEYS),
        st.tuples(st.just("evict"), st.integers(1, 8)),
        st.tuples(st.just("lock"), KEYS),
        st.tuples(st.just("unlock"), st.integers(0, 10)),
        st.tuples(st.just("backup"), KEYS),
    ),
    max_size=40,
)


def check_invariants(tree: RadixTree) -> None:
    nodes = list(tree.nodes())
    on_device = [n for n in nodes if n.device]
    assert tree.evictable_tokens + tree.protected_tokens == sum(len(n.key) for n in on_device)
    assert tree.evictable_tokens == sum(len(n.key) for n in on_device if n.lock_ref == 0)
    for n in on_device:
        assert n.parent is tree.root or n.parent.device, f"{n!r} on device under {n.parent!r}"
        assert n.dev_children == sum(1 for c in n.children.values() if c.device)
    assert tree.num_nodes == len(nodes) + 1


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_random_operations_keep_the_counters_and_never_evict_a_locked_node(ops):
    tree = RadixTree()
    held = []
    for op, arg in ops:
        if op == "insert":
            tree.insert(arg)
        elif op == "match":
            tree.match(arg)
        elif op == "lock":
            node = tree.match(arg).device_node
            if node is not tree.root:
                tree.lock(node)
                held.append(node)
        elif op == "unlock" and held:
            tree.unlock(held.pop(arg % len(held)))
        elif op == "backup":
            # Back up the matched device path, parents first, as the controller does.
            node, chain = tree.match(arg).device_node, []
            while node is not tree.root:
                chain.append(node)
                node = node.parent
            for n in reversed(chain):
                if not n.host:
                    tree.set_host(n, 1)
        elif op == "evict":
            locked = [n for n in tree.nodes() if n.lock_ref and n.device]
            tree.evict(arg)
            assert all(n.device and n.parent is not None for n in locked)
        check_invariants(tree)
    for node in held:
        assert node.device


def test_one_page_nodes_keep_each_page_a_node_of_its_own():
    tree = RadixTree(page_size=1, one_page_nodes=True)
    res = tree.insert([1, 2, 3])
    assert [n.key for n in res.path] == [[1], [2], [3]] and tree.num_nodes == 4
    assert tree.evict(1) == (1, 1)  # the LRU leaf is one page, not the whole run
    assert tree.match([1, 2, 3]).device_pages == 2
