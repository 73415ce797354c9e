"""The FULL component of DeepSeek V4's tree: its leaf sets, its LRU, its locks.

A node exists while its Full KV does (on device or host); device eviction takes the least recently used
unlocked device leaf (``components/full.py:209-246``, a heap on ``last_access_time``), host eviction the least
recently used host leaf; a lock covers the whole root path (``components/full.py:290-301``) and, through the
SWA component, the window run behind the node. Bare line numbers are ``unified_tree_core.py``'s.

:class:`FullComponent` is a base of :class:`~sim.cache.v4.unified.UnifiedTree` and works on its state: a base
rather than a member because ``update_leaf`` and the lock walks run for every node on every request's path.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from sim.cache.v4.node import UNode

if TYPE_CHECKING:
    from sim.cache.v4.swa import SWAComponent

__all__ = ["FullComponent"]


class FullComponent:
    """The device leaves (Full on device, unlocked, no child with Full on device) and the host leaves (Full only
    on host, no children, unlocked on both tiers, no copy in flight), each with its LRU heap of
    ``(last_access, id, node)`` entries (stale ones are skipped when popped), and the Full ledgers (tokens)."""

    # Set by UnifiedTree.__init__.
    root: UNode
    hicache: bool
    swa: SWAComponent
    num_nodes: int
    full_evictable: int
    full_protected: int
    leaves: set[UNode]
    _heap: list[tuple[float, int, UNode]]
    host_leaves: set[UNode]
    _host_heap: list[tuple[float, int, UNode]]

    # ----- leaves and the LRU ---------------------------------------------------------------------
    # Each heap holds at most one entry per node and key: a node's ``heap_t`` / ``host_heap_t`` is the key of its
    # entry not yet popped, so a node that leaves and re-enters a leaf set with its time unchanged (a lock and
    # unlock) pushes nothing. Pop order is unchanged: it is the members' by (last_access, id) either way.
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
                    t = node.last_access
                    if node.heap_t != t:
                        node.heap_t = t
                        heapq.heappush(self._heap, (t, node.id, node))
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
                t = node.last_access
                if node.host_heap_t != t:
                    node.host_heap_t = t
                    heapq.heappush(self._host_heap, (t, node.id, node))
        else:
            self.host_leaves.discard(node)

    def _refile(self, node: UNode) -> None:
        """``node``'s time changed: file its new key if it is a leaf."""
        t = node.last_access
        if node in self.leaves:
            if node.heap_t != t:
                node.heap_t = t
                heapq.heappush(self._heap, (t, node.id, node))
        elif node in self.host_leaves and node.host_heap_t != t:
            node.host_heap_t = t
            heapq.heappush(self._host_heap, (t, node.id, node))

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
        """The least recently used device leaf, taken off the heap (None: there is none)."""
        heap, members, pop = self._heap, self.leaves, heapq.heappop
        while heap:
            t, _, node = pop(heap)
            if node.heap_t == t:
                node.heap_t = None
                if node in members and node.last_access == t:
                    return node
        return None

    def pop_host_leaf(self) -> UNode | None:
        """The least recently used host leaf, taken off the heap (None: there is none)."""
        heap, members, pop = self._host_heap, self.host_leaves, heapq.heappop
        while heap:
            t, _, node = pop(heap)
            if node.host_heap_t == t:
                node.host_heap_t = None
                if node in members and node.last_access == t:
                    return node
        return None

    def _compact(self) -> None:
        """Drop stale heap entries once a heap outgrows the tree (it only grows between pops)."""
        if len(self._heap) > 4 * self.num_nodes + 1024:
            self._heap = self._live(self._heap, self.leaves, "heap_t")
        if len(self._host_heap) > 4 * self.num_nodes + 1024:
            self._host_heap = self._live(self._host_heap, self.host_leaves, "host_heap_t")

    @staticmethod
    def _live(heap: list, members: set, mark: str) -> list:
        """``heap``'s entries that can still be popped, heapified; the dropped ones' marks cleared."""
        live = []
        for e in heap:
            node = e[2]
            if node in members and e[0] == node.last_access:
                live.append(e)
            elif getattr(node, mark) == e[0]:
                setattr(node, mark, None)
        heapq.heapify(live)
        return live

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
