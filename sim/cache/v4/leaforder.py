"""The least-recently-used order over one kind of the tree's leaves (device leaves, host leaves).

Eviction takes the member with the smallest ``(last_access, id)`` (``components/full.py:209-246``: a heap on
``last_access_time``). Times only grow (``UnifiedTree``'s access counter), so nearly every key filed is the
greatest yet: a leaf created, refreshed by a match or an insert, or released by the request that made it.
Those keys go to an ordered dict, where appending, moving a refreshed node and popping the oldest cost O(1);
the few that arrive out of order (a parent left a leaf by its child's eviction, a node unlocked with an old
time) go to a heap. A pop takes the smaller of the two heads, so the order is the one a single heap gives.

Entries are checked when they reach a head, not when a node stops being a leaf: a node keeps its entry while it
is locked or has a child, and becomes a leaf again with nothing to do if its time did not change meanwhile.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable

from sim.cache.v4.node import UNode

__all__ = ["LeafOrder"]


class LeafOrder:
    """Entries ``(t, node)``: ``recent`` in increasing ``(t, id)`` order (at most one per node), ``heap`` the
    rest; ``mark[node]`` is the time of the entry ``node`` has, so a node is filed once per time. An entry is
    live while its node is a leaf (``is_leaf``) with that time; others are dropped as they reach a head."""

    __slots__ = ("recent", "heap", "mark", "last_t", "last_id")

    def __init__(self) -> None:
        self.recent: OrderedDict[UNode, float] = OrderedDict()
        self.heap: list[tuple[float, int, UNode]] = []
        self.mark: dict[UNode, float] = {}
        self.last_t = -float("inf")  # the greatest key in ``recent``
        self.last_id = -1

    def __len__(self) -> int:
        return len(self.recent) + len(self.heap)

    def file(self, node: UNode, t: float) -> None:
        """``node`` is a leaf with time ``t``: give it an entry of that key unless it has one."""
        mark = self.mark
        if mark.get(node) == t:
            return
        mark[node] = t
        recent = self.recent
        if t > self.last_t or (t == self.last_t and node.id > self.last_id) or not recent:
            recent[node] = t
            recent.move_to_end(node)
            self.last_t, self.last_id = t, node.id
        else:
            heapq.heappush(self.heap, (t, node.id, node))

    def pop(self, is_leaf: Callable[[UNode], bool]) -> UNode | None:
        """The leaf with the smallest key, its entry taken (None: there is none)."""
        recent, heap, mark = self.recent, self.heap, self.mark
        node = None
        while recent:  # the oldest live entry in order
            node, t = next(iter(recent.items()))
            if node.last_access == t and is_leaf(node):
                break
            del recent[node]
            if mark.get(node) == t:
                del mark[node]
            node = None
        while heap:  # the smallest live entry out of order, taken if it is older
            ht, hid, hnode = heap[0]
            if hnode.last_access == ht and is_leaf(hnode):
                if node is not None and (t < ht or (t == ht and node.id < hid)):
                    break
                heapq.heappop(heap)
                del mark[hnode]
                return hnode
            heapq.heappop(heap)
            if mark.get(hnode) == ht:
                del mark[hnode]
        if node is not None:
            del recent[node]
            del mark[node]
        return node

    def compact(self, is_leaf: Callable[[UNode], bool]) -> None:
        """Drop every entry that can no longer be popped."""
        recent = OrderedDict((n, t) for n, t in self.recent.items() if n.last_access == t and is_leaf(n))
        heap = [e for e in self.heap if e[2].last_access == e[0] and is_leaf(e[2])]
        heapq.heapify(heap)
        self.recent, self.heap = recent, heap
        self.mark = {n: t for n, t in recent.items()}
        self.mark.update((n, t) for t, _, n in heap)
