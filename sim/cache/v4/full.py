"""The FULL component of DeepSeek V4's tree: its leaf sets, its LRU, its locks.

A node exists while its Full KV does (on device or host); device eviction takes the least recently used
unlocked device leaf (``components/full.py:209-246``, a heap on ``last_access_time``), host eviction the least
recently used host leaf; a lock covers the whole root path (``components/full.py:290-301``) and, through the
SWA component, the window run behind the node. Bare line numbers are ``unified_tree_core.py``'s.

:class:`FullComponent` is a base of :class:`~sim.cache.v4.unified.UnifiedTree` and works on its state: a base
rather than a member because ``update_leaf`` and the lock walks run for every node on every request's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cache.v4.leaforder import LeafOrder
from sim.cache.v4.node import UNode

if TYPE_CHECKING:
    from sim.cache.v4.swa import SWAComponent

__all__ = ["FullComponent"]


class FullComponent:
    """The device leaves (Full on device, unlocked, no child with Full on device) and the host leaves (Full only
    on host, no children, unlocked on both tiers, no copy in flight), each with its LRU order
    (:class:`~sim.cache.v4.leaforder.LeafOrder`), and the Full ledgers (tokens)."""

    # Set by UnifiedTree.__init__.
    root: UNode
    hicache: bool
    swa: SWAComponent
    num_nodes: int
    full_evictable: int
    full_protected: int
    leaves: set[UNode]
    order: LeafOrder
    host_leaves: set[UNode]
    host_order: LeafOrder

    # ----- leaves and the LRU ---------------------------------------------------------------------
    # Every member of a leaf set has an entry of its current time in that set's LeafOrder; a node that leaves and
    # re-enters a set with its time unchanged (a lock and unlock) keeps its entry and files nothing.
    def update_leaf(self, node: UNode) -> None:
        """Keep the device leaves (Full on device, unlocked, no child with Full on device) and the host
        leaves (Full only on host, no children, unlocked on both tiers, no copy in flight) current
        (``:1592-1602, 2348-2387``)."""
        if node is self.root:
            return
        if node.full:
            if not node.lock and not node.swa_lock and not node.full_kids:
                leaves = self.leaves
                if node not in leaves:
                    leaves.add(node)
                    self.order.file(node, node.last_access)
            else:
                self.leaves.discard(node)
            if self.hicache:
                self.host_leaves.discard(node)
            return
        self.leaves.discard(node)
        if (node.host and not node.lock and not node.swa_lock and not node.host_lock and not node.children
                and node.pending is None):  # fmt: skip
            host_leaves = self.host_leaves
            if node not in host_leaves:
                host_leaves.add(node)
                self.host_order.file(node, node.last_access)
        else:
            self.host_leaves.discard(node)

    def _refile(self, node: UNode) -> None:
        """``node``'s time changed: file its new key if it is a leaf."""
        if node in self.leaves:
            self.order.file(node, node.last_access)
        elif node in self.host_leaves:
            self.host_order.file(node, node.last_access)

    def touch_path(self, node: UNode, t: float) -> None:
        """A match's LRU refresh: ``node`` and its ancestors get time ``t``, 1e-5 less per level up
        (``:1012-1036``)."""
        leaves, host_leaves = self.leaves, self.host_leaves
        while node is not None:
            node.last_access = t
            if node in leaves or node in host_leaves:
                self._refile(node)
            t -= 1e-5
            node = node.parent

    def pop_leaf(self) -> UNode | None:
        """The least recently used device leaf, its entry taken (None: there is none)."""
        return self.order.pop(self.leaves)

    def pop_host_leaf(self) -> UNode | None:
        """The least recently used host leaf, its entry taken (None: there is none)."""
        return self.host_order.pop(self.host_leaves)

    def _compact(self) -> None:
        """Drop stale entries once an order outgrows the tree (it only grows between pops)."""
        if len(self.order) > 4 * self.num_nodes + 1024:
            self.order.compact(self.leaves)
        if len(self.host_order) > 4 * self.num_nodes + 1024:
            self.host_order.compact(self.host_leaves)

    # ----- locks -----------------------------------------------------------------------------------
    def lock(self, node: UNode) -> int | None:
        """Lock ``node``'s root path (Full) and its window run (SWA); returns the SWA boundary id."""
        x, root, leaves, moved = node, self.root, self.leaves, 0
        while x is not root:
            if x.lock == 0:
                if x.full:
                    moved += x.tokens
                leaves.discard(x)
            x.lock += 1
            x = x.parent
        self.full_evictable -= moved
        self.full_protected += moved
        uuid = self.swa.lock(node)
        self._locked(node)
        return uuid

    def relock(self, old: UNode, old_uuid: int | None, new: UNode) -> int | None:
        """``unlock(old, old_uuid)`` then ``lock(new)``, with the same end state. A request's checkpoint moves
        its lock down its own path, so where ``old`` is an ancestor of ``new`` (or ``new`` itself) only the
        nodes between them change their count; the shared root path is not walked twice."""
        root, seg, x = self.root, [], new
        while x is not old and x is not root:
            seg.append(x)
            x = x.parent
        if x is not old:
            self.unlock(old, old_uuid)
            return self.lock(new)
        self.swa.unlock(old, old_uuid)
        leaves, moved = self.leaves, 0
        for x in seg:
            if x.lock == 0:
                if x.full:
                    moved += x.tokens
                leaves.discard(x)
            x.lock += 1
        self.full_evictable -= moved
        self.full_protected += moved
        uuid = self.swa.lock(new)
        self._locked(new)
        return uuid

    def _locked(self, node: UNode) -> None:
        """``update_leaf`` of a node just locked: it is no leaf of either kind (nor is the root ever one)."""
        self.leaves.discard(node)
        self.host_leaves.discard(node)

    def unlock(self, node: UNode, uuid: int | None) -> None:
        self.swa.unlock(node, uuid)
        x, root, moved, filed = node, self.root, 0, False
        while x is not root:
            if x.lock == 1:
                if x.full:
                    moved += x.tokens
                x.lock = 0
                if not x.full_kids:  # a node with a device child is no leaf of either kind
                    self.update_leaf(x)
                    filed = filed or x is node
            elif x.lock <= 0:
                raise RuntimeError(f"unlock of an unlocked node {x!r}")
            else:
                x.lock -= 1
            x = x.parent
        self.full_evictable += moved
        self.full_protected -= moved
        if not filed:  # (the walk above changes no state update_leaf reads of ``node`` after filing it)
            self.update_leaf(node)
