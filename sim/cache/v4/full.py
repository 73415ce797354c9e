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
    def update_leaf(self, node: UNode) -> None:
        """Keep the device leaves (Full on device, unlocked, no child with Full on device) and the host
        leaves (Full only on host, no children, unlocked on both tiers, no copy in flight) current
        (``:1592-1602, 2348-2387``)."""
        if node is self.root:
            return
        unlocked = not node.lock and not node.swa_lock
        if node.full:
            if unlocked and not node.full_kids:
                if node not in self.leaves:
                    self.leaves.add(node)
                    heapq.heappush(self._heap, (node.last_access, node.id, node))
            else:
                self.leaves.discard(node)
            if self.hicache:
                self.host_leaves.discard(node)
            return
        self.leaves.discard(node)
        if node.host and unlocked and not node.host_lock and not node.children and node.pending is None:
            if node not in self.host_leaves:
                self.host_leaves.add(node)
                heapq.heappush(self._host_heap, (node.last_access, node.id, node))
        else:
            self.host_leaves.discard(node)

    def _refile(self, node: UNode) -> None:
        if node in self.leaves:
            heapq.heappush(self._heap, (node.last_access, node.id, node))
        elif node in self.host_leaves:
            heapq.heappush(self._host_heap, (node.last_access, node.id, node))

    def _pop(self, heap: list, members: set) -> UNode | None:
        while heap:
            t, _, node = heapq.heappop(heap)
            if node in members and node.last_access == t:
                return node
        return None

    def _compact(self) -> None:
        """Drop stale heap entries once a heap outgrows the tree (it only grows between pops)."""
        if len(self._heap) > 4 * self.num_nodes + 1024:
            self._heap = [e for e in self._heap if e[2] in self.leaves and e[0] == e[2].last_access]
            heapq.heapify(self._heap)
        if len(self._host_heap) > 4 * self.num_nodes + 1024:
            self._host_heap = [e for e in self._host_heap if e[2] in self.host_leaves and e[0] == e[2].last_access]
            heapq.heapify(self._host_heap)

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
        self.update_leaf(node)
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
        self.update_leaf(new)
        return uuid

    def unlock(self, node: UNode, uuid: int | None) -> None:
        self.swa.unlock(node, uuid)
        x, root, moved = node, self.root, 0
        while x is not root:
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
        self.update_leaf(node)
