"""The least-recently-used order over one kind of the tree's leaves (device leaves, host leaves).

Eviction takes the member with the smallest ``(last_access, id)`` (``components/full.py:209-246``: a heap on
``last_access_time``). Times only grow (``UnifiedTree``'s access counter), yet an order is fed by two or three
interleaved streams, each nearly monotone: leaves created or refreshed at the current time; parents left leaves
by their children's eviction and nodes unlocked with the times they had, roughly in LRU order; for the host
order, nodes demoted from device in the device order's LRU order. One sorted run catches one stream and sends
the others to a heap (~40% of the keys, each a sift of tuple compares), so the order keeps :data:`RUNS` sorted
runs (lists appended at the tail, read from a moving head), in decreasing order of their tails: a key goes to
the first run whose tail is below it (the greatest such tail: a best fit, so s streams need only s runs), else to
a run left empty, else to the heap (~2-4% of the keys). A pop takes the smallest head of the runs and the heap,
so the order is the one a single heap gives.

Entries are checked when they reach the head of their run or of the heap, not when a node stops being a leaf: a
node keeps an entry deeper in while it is locked or has a child, and becomes a leaf again with nothing to do if
its time did not change meanwhile; one dropped at a head is filed again when the tree finds it a leaf again. A
refreshed node's old entry stays behind, dead, until it reaches a head or :meth:`LeafOrder.compact`. Each pop
clears the dead heads of the heap and of every run, not only the smallest: a dead entry holds its node, and a
node removed from the tree its whole record, until it goes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from sim.cache.v4.node import UNode

__all__ = ["RUNS", "LeafOrder"]

RUNS = 4  # two or three streams feed an order; each run costs a compare per pop (3 and 6 measure the same)
_TAKEN = UNode([], None, -1, 0.0, 1)  # what a taken slot holds until the run sheds it


class _Run:
    """Entries ``(times[i], nodes[i])`` for ``i >= head``, in increasing ``(t, id)`` order; ``(tail_t,
    tail_id)`` is the key of the last one appended (kept when the run empties), unboxed for the compares."""

    __slots__ = ("nodes", "times", "head", "tail_t", "tail_id")

    def __init__(self) -> None:
        self.nodes: list[UNode] = []
        self.times: list[float] = []
        self.head = 0
        self.tail_t = -float("inf")
        self.tail_id = -1

    def append(self, node: UNode, t: float) -> None:
        if self.head and self.head == len(self.nodes):  # empty: start over at the front
            self.nodes.clear()
            self.times.clear()
            self.head = 0
        self.nodes.append(node)
        self.times.append(t)
        self.tail_t, self.tail_id = t, node.id

    def take(self) -> None:
        """Drop the head entry; the lists shed their taken prefix once it is half of them (amortized O(1)). Its
        slot lets go of the node meanwhile, which may have left the tree."""
        self.nodes[self.head] = _TAKEN
        self.head += 1
        if self.head >= 64 and 2 * self.head >= len(self.nodes):
            del self.nodes[: self.head]
            del self.times[: self.head]
            self.head = 0


class LeafOrder:
    """Entries ``(t, node)`` in ``RUNS`` sorted ``runs`` (some may be empty), ordered by decreasing tail, and a
    ``heap`` of ``(t, id, node)`` for the rest; ``size`` counts them all. ``mark[node]`` is the time of the
    entry ``node`` has, so a node is filed once per time. An entry is live while its node is a leaf
    (``is_leaf``) with that time; others are dropped when they reach a head. ``superseded`` counts the entries
    whose node has been filed again since (``mark`` no longer their time): once they are half of all, they are
    pruned at once, as a refreshed node's old entry can sit deep in a run long after its node left the tree."""

    __slots__ = ("runs", "heap", "mark", "size", "superseded")

    def __init__(self) -> None:
        self.runs: list[_Run] = [_Run() for _ in range(RUNS)]
        self.heap: list[tuple[float, int, UNode]] = []
        self.mark: dict[UNode, float] = {}
        self.size = self.superseded = 0

    def __len__(self) -> int:
        return self.size

    def file(self, node: UNode, t: float) -> None:
        """``node`` is a leaf with time ``t``: give it an entry of that key unless it has one."""
        mark = self.mark
        m = mark.get(node)
        if m is not None:
            if m == t:
                return
            self.superseded += 1
        mark[node] = t
        if self.superseded > self.size // 2 + 1024:
            self._prune()
        self.size += 1
        nid = node.id
        runs = self.runs
        # The first run whose tail is below (t, nid) has the greatest such tail; appending keeps the tails
        # in decreasing order, as the run before has a tail above (t, nid).
        for run in runs:
            if run.tail_t < t or (run.tail_t == t and run.tail_id < nid):
                run.append(node, t)
                return
        for run in runs:  # below every tail: an empty run moves to the back to take it
            if run.head == len(run.nodes):
                runs.remove(run)
                runs.append(run)
                run.append(node, t)
                return
        heapq.heappush(self.heap, (t, nid, node))

    def pop(self, is_leaf: Callable[[UNode], bool]) -> UNode | None:
        """The leaf with the smallest key, its entry taken (None: there is none). Dead entries at the head of
        the heap and of every run go first, so each head compared is live."""
        heap = self.heap
        node: UNode | None = None
        t, nid = 0.0, 0
        while heap:
            t, nid, node = heap[0]
            if node.last_access == t and is_leaf(node):
                break
            heapq.heappop(heap)
            self._drop(node, t)
            node = None
        best: _Run | None = None  # the run with the smallest head; None: the heap's
        for run in self.runs:
            nodes, times = run.nodes, run.times
            while run.head < len(nodes):
                rn, rt = nodes[run.head], times[run.head]
                if rn.last_access == rt and is_leaf(rn):
                    if node is None or rt < t or (rt == t and rn.id < nid):
                        best, node, t, nid = run, rn, rt, rn.id
                    break
                run.take()
                self._drop(rn, rt)
        if node is None:
            return None
        if best is None:
            heapq.heappop(heap)
        else:
            best.take()
        self.size -= 1
        del self.mark[node]
        return node

    def _drop(self, node: UNode, t: float) -> None:
        """A dead entry ``(t, node)`` was taken: its mark goes if it is this entry's."""
        self.size -= 1
        m = self.mark.get(node)
        if m is not None and m == t:
            del self.mark[node]
        else:
            self.superseded -= 1

    def _prune(self) -> None:
        """Drop the superseded entries (their marks are already another time's)."""
        mark = self.mark
        self._keep(lambda n, t: mark.get(n) == t)

    def compact(self, is_leaf: Callable[[UNode], bool]) -> None:
        """Drop every entry that can no longer be popped: one per live leaf stays, and only their marks."""
        self._keep(lambda n, t: n.last_access == t and is_leaf(n))
        self.mark = {n: t for r in self.runs for n, t in zip(r.nodes, r.times)}
        self.mark.update((n, t) for t, _, n in self.heap)

    def _keep(self, live: Callable[[UNode, float], bool]) -> None:
        """Keep the entries ``live`` holds to, each run in its order (its tail key still a bound), the heap a heap."""
        for r in self.runs:
            kept = [i for i in range(r.head, len(r.nodes)) if live(r.nodes[i], r.times[i])]
            r.nodes, r.times, r.head = [r.nodes[i] for i in kept], [r.times[i] for i in kept], 0
        self.heap = [e for e in self.heap if live(e[2], e[0])]
        heapq.heapify(self.heap)
        self.size = len(self.heap) + sum(len(r.nodes) for r in self.runs)
        self.superseded = 0
