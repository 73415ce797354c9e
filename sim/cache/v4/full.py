"""The FULL component of DeepSeek V4's tree: its leaf sets, its LRU, its locks.

A node exists while its Full KV does (on device or host); device eviction takes the least recently used
unlocked device leaf (``components/full.py:209-246``, a heap on ``last_access_time``), host eviction the least
recently used host leaf; a lock covers the whole root path (``components/full.py:290-301``) and, through the
SWA component, the window run behind the node. Bare line numbers are ``unified_tree_core.py``'s.

:class:`FullComponent` is a base of :class:`~sim.cache.v4.unified.UnifiedTree` and works on its state: a base
rather than a member because ``update_leaf`` and the lock walks run for every node on every request's path.
"""

from __future__ import annotations

from mypy_extensions import trait

from sim.cache.v4.node import UNode
from sim.cache.v4.treestate import TreeState

__all__ = ["FullComponent", "is_host_leaf", "is_leaf"]


def is_leaf(node: UNode) -> bool:
    """A device leaf: Full KV on device, unlocked on both components, no child with Full KV on device (the
    root is always locked)."""
    return node.full and not (node.lock or node.swa_lock or node.full_kids)


def is_host_leaf(node: UNode) -> bool:
    """A host leaf: Full KV only on host, no children, unlocked on both tiers, no copy in flight."""
    return (not node.full and node.host and not (node.lock or node.swa_lock or node.host_lock or node.children)
            and node.pending is None)  # fmt: skip


@trait
class FullComponent(TreeState):
    """The device leaves (Full on device, unlocked, no child with Full on device) and the host leaves (Full only
    on host, no children, unlocked on both tiers, no copy in flight), each with its LRU order
    (:class:`~sim.cache.v4.leaforder.LeafOrder`), and the Full ledgers (tokens)."""


    # ----- leaves and the LRU ---------------------------------------------------------------------
    # A leaf is a state, not a set: each LeafOrder holds an entry of every leaf's current time (and stale ones,
    # dropped when they surface), so a node that stops being a leaf (locked, given a child) has nothing to
    # undo, and one that becomes a leaf again with its time unchanged finds its entry still there.
    def update_leaf(self, node: UNode) -> None:
        """File ``node`` in its order if it is a device or a host leaf (``:1592-1602, 2348-2387``)."""
        if node.full:
            if not (node.lock or node.swa_lock or node.full_kids):  # (the root is always locked)
                self.order.file(node, node.last_access)
        elif node.host and not (node.lock or node.swa_lock or node.host_lock or node.children
                                or node.pending is not None):  # fmt: skip
            self.host_order.file(node, node.last_access)

    def touch_path(self, node: UNode | None, t: float) -> None:
        """A match's LRU refresh: ``node`` and its ancestors get time ``t``, 1e-5 less per level up
        (``:1012-1036``)."""
        order = self.order
        while node is not None:
            node.last_access = t
            if not node.full:  # update_leaf, inlined for device nodes
                self.update_leaf(node)
            elif not (node.lock or node.swa_lock or node.full_kids):
                order.file(node, t)
            t -= 1e-5
            node = node.parent

    def pop_leaf(self) -> UNode | None:
        """The least recently used device leaf, its entry taken (None: there is none)."""
        return self.order.pop(is_leaf)

    def pop_host_leaf(self) -> UNode | None:
        """The least recently used host leaf, its entry taken (None: there is none)."""
        return self.host_order.pop(is_host_leaf)

    def _compact(self) -> None:
        """Drop stale entries once an order outgrows the tree (it only grows between pops)."""
        if len(self.order) > 4 * self.num_nodes + 1024:
            self.order.compact(is_leaf)
        if len(self.host_order) > 4 * self.num_nodes + 1024:
            self.host_order.compact(is_host_leaf)

    # ----- locks -----------------------------------------------------------------------------------
    def lock(self, node: UNode) -> int | None:
        """Lock ``node``'s root path (Full) and its window run (SWA); returns the SWA boundary id."""
        x: UNode | None = node
        root, moved = self.root, 0
        while x is not root:
            assert x is not None  # a node in the tree has the root above it
            if x.lock == 0 and x.full:
                moved += x.tokens
            x.lock += 1
            x = x.parent
        self.full_evictable -= moved
        self.full_protected += moved
        return self.swa.lock(node)

    def relock(self, old: UNode, old_uuid: int | None, new: UNode) -> int | None:
        """``unlock(old, old_uuid)`` then ``lock(new)``, with the same end state. A request's checkpoint moves
        its lock down its own path, so where ``old`` is an ancestor of ``new`` (or ``new`` itself) only the
        nodes between them change their count; the shared root path is not walked twice."""
        x: UNode | None = new
        root, seg = self.root, []
        while x is not old and x is not root:
            assert x is not None
            seg.append(x)
            x = x.parent
        if x is not old:
            self.unlock(old, old_uuid)
            return self.lock(new)
        self.swa.unlock(old, old_uuid)
        moved = 0
        for y in seg:
            if y.lock == 0 and y.full:
                moved += y.tokens
            y.lock += 1
        self.full_evictable -= moved
        self.full_protected += moved
        return self.swa.lock(new)

    def unlock(self, node: UNode, uuid: int | None) -> None:
        self.swa.unlock(node, uuid)
        x: UNode | None = node
        root, moved = self.root, 0
        while x is not root:
            assert x is not None
            if x.lock == 1:
                if x.full:
                    moved += x.tokens
                x.lock = 0
                if not x.full_kids:  # a node with a device child is no leaf of either kind
                    self.update_leaf(x)
            elif x.lock <= 0:
                raise RuntimeError(f"unlock of an unlocked node {x!r}")
            else:
                x.lock -= 1
            x = x.parent
        self.full_evictable += moved
        self.full_protected -= moved
