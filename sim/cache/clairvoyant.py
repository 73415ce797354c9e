"""The clairvoyant bound: the best hit rate any eviction policy could reach on a trace, knowing its future.

A reference no server can implement (it reads requests that have not arrived yet), so a user sees how much
headroom a policy leaves. Belady's rule applied to a prefix-closed cache of pages: after each request,
keep the pages whose next use is soonest and drop the one whose next use is furthest away, deeper pages
first among equals.

Why it bounds every policy of this simulator at the same capacity:
- a page is identified by its whole prefix (a trie over the trace), as the radix tree identifies it;
- any policy holds at most ``capacity`` pages between requests and only ever adds pages of the request
  being served; the bound may even let a request overflow the capacity while it runs (it inserts the
  whole path, then evicts), which only helps it;
- a page counts as used by a request only within the request's match cap (``input_len - 1`` tokens,
  :meth:`sim.cache.hicache.HiCache.lookup`), the only part a hit is counted on;
- a page's next use is never sooner than its parent's, so the furthest page (deepest among ties) is
  always a leaf: the kept set stays prefix-closed and every kept page of a request's prefix is a hit.

Keeping the soonest-needed pages is optimal for caches of unit-size pages (Belady 1966; the exchange
argument holds when a request brings several pages at once). Belady's rule is a stack algorithm: the set
kept at capacity C is inside the set kept at C' > C, so one clairvoyant hierarchy holds both the C = L1
set on device and the C = L1 + L2 set over both tiers, and the two bounds are reached together.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sim.workload.request import Request

__all__ = ["Bound", "PageTrace", "clairvoyant"]

_DEPTH, _NEXT = 32, 64  # bit offsets of depth and next use in a packed entry; the page id is below
_PAGE_MASK = (1 << _DEPTH) - 1


@dataclass(frozen=True)
class Bound:
    """Hits of the clairvoyant cache of ``capacity`` pages (None: unbounded) over one trace."""

    capacity: int | None
    hit_pages: int
    input_pages: int
    hit_tokens: int
    input_tokens: int
    wall_s: float

    def hit_rate(self, by: str = "tokens") -> float:
        hits, total = (self.hit_pages, self.input_pages) if by == "pages" else (self.hit_tokens, self.input_tokens)
        return hits / total if total else 0.0


class PageTrace:
    """A trace as page ids (one per distinct prefix) with each page occurrence's next use.

    Built once per trace and page size; :meth:`bound` then runs one capacity in one pass.
    """

    def __init__(self, requests: Iterable[Request], page_tokens: int) -> None:
        ids: dict[tuple[int, object], int] = {}
        self.paths: list[list[int]] = []
        self.caps: list[int] = []
        self.page_tokens = page_tokens
        self.input_tokens = 0
        for req in requests:
            parent, path = -1, []
            for key in req.keys:
                pid = ids.get((parent, key))
                if pid is None:
                    pid = ids[(parent, key)] = len(ids)
                path.append(pid)
                parent = pid
            self.paths.append(path)
            self.caps.append(max(0, (req.input_len - 1) // page_tokens))  # HiCache.lookup's match cap
            self.input_tokens += req.input_len
        self.input_pages = sum(len(p) for p in self.paths)
        never = len(self.paths)  # after the last request
        last: dict[int, int] = {}
        # Each page occurrence as one int, -(next use, depth, page) packed: a heap of ints is much faster
        # than one of tuples, and the smallest is the page needed furthest away, deepest among equals.
        self.entries: list[list[int]] = [[]] * len(self.paths)
        for i in range(len(self.paths) - 1, -1, -1):
            path = self.paths[i]
            self.entries[i] = [-((last.get(pid, never) << _NEXT) | (d << _DEPTH) | pid) for d, pid in enumerate(path)]
            for pid in path[: self.caps[i]]:
                last[pid] = i

    def bound(self, capacity: int | None) -> Bound:
        """Replay with Belady's rule at ``capacity`` pages (None: nothing is ever evicted)."""
        start = time.perf_counter()
        cap = float("inf") if capacity is None else capacity
        resident: dict[int, int] = {}  # page -> its entry in the heap
        heap: list[int] = []
        push, pop = heapq.heappush, heapq.heappop
        hits = 0
        for path, entries, limit in zip(self.paths, self.entries, self.caps):
            for pid in path[:limit]:
                if pid not in resident:
                    break
                hits += 1
            for pid, entry in zip(path, entries):
                resident[pid] = entry
                push(heap, entry)
            while len(resident) > cap:
                entry = pop(heap)
                pid = -entry & _PAGE_MASK
                if resident.get(pid) == entry:
                    del resident[pid]
        pt = self.page_tokens
        return Bound(capacity, hits, self.input_pages, hits * pt, self.input_tokens, time.perf_counter() - start)


def clairvoyant(requests: Iterable[Request], capacities: Iterable[int | None], page_tokens: int) -> list[Bound]:
    """The clairvoyant bound of ``requests`` at each capacity (pages of ``page_tokens`` tokens)."""
    trace = PageTrace(requests, page_tokens)
    return [trace.bound(c) for c in capacities]
