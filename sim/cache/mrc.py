"""The LRU hit-rate curve over every capacity at once: stack distances over a prefix tree (Mattson 1970).

A request-order replay stamps every page of a request's path (the match stamps the matched part, the
insert the whole path), so a page's recency is the last request whose path held it; within a request a
deeper page counts as older. An ancestor is then never older than its descendants. Page-granular LRU under
that order is a stack algorithm: the pages it keeps at capacity C are the C most recent, a subset of those
kept at C + 1 (the inclusion property), so a page's position in the recency stack, its *stack distance*,
decides at once every capacity it hits at. Distances grow along a path (ancestors are more recent), so the
pages of a request's capped prefix that hit at C are a prefix of it, exactly what a radix match counts.

Where this is exact, and where not (``docs/notes/mrc.md`` has the proof):

- exact for page-granular LRU at every capacity (``tests/sim/cache/test_mrc.py``, on random traces);
- the single-pool tree (:class:`sim.cache.hicache.HiCache`, L2 off, LRU, request order) equals it on any trace
  where it holds page LRU's pages after every request. It departs in three ways, each SGLang's: it evicts
  whole leaf nodes, a match that stops inside a node refreshes the node's unmatched tail, and a request whose
  match is capped one page short reserves that page again. On the bundled conversation trace the curve is
  within 0.22 points of replays at 1,000-24,000 pages, above them (whole-leaf eviction holds fewer pages);
- DeepSeek-V4's tree is not a stack algorithm: a Full hit also needs a live SWA window at the match end,
  kept by a second pool with its own LRU and tombstones, so its hits are not a function of one recency
  order; :func:`applies_to` says so and callers replay at each capacity instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.cache.clairvoyant import PageTrace
from sim.model.pools import ModelSpec
from sim.workload.request import Request

__all__ = ["MissRatioCurve", "applies_to", "miss_ratio_curve"]


@dataclass(frozen=True)
class MissRatioCurve:
    """``hits_at[d]``: capped-prefix page hits whose stack distance is d (d = 1 .. len - 1; index 0 unused)."""

    hits_at: np.ndarray
    input_pages: int
    input_tokens: int
    page_tokens: int
    distinct_pages: int

    def hit_pages(self, capacity: int | None) -> int:
        """Hit pages of page-granular LRU at ``capacity`` pages (None: unbounded)."""
        cum = self._cum()
        if capacity is None or capacity >= len(cum) - 1:
            return int(cum[-1])
        return int(cum[max(0, capacity)])

    def hit_rate(self, capacity: int | None, by: str = "tokens") -> float:
        hits = self.hit_pages(capacity)
        if by == "pages":
            return hits / self.input_pages if self.input_pages else 0.0
        return hits * self.page_tokens / self.input_tokens if self.input_tokens else 0.0

    def curve(self, capacities: Sequence[int]) -> np.ndarray:
        """Hit rates by tokens at each capacity (vectorised :meth:`hit_rate`)."""
        cum = self._cum()
        idx = np.clip(np.asarray(capacities, dtype=np.int64), 0, len(cum) - 1)
        return cum[idx] * self.page_tokens / max(self.input_tokens, 1)

    def _cum(self) -> np.ndarray:
        return np.cumsum(self.hits_at)


def applies_to(model: ModelSpec) -> tuple[bool, str]:
    """(whether the one-pass curve is this model's tree's, why not when it is not)."""
    if model.has_swa:
        return False, (f"{model.name} has sliding-window pools: a Full hit also needs a live SWA window kept by "
                       "its own LRU (SGLang's SWA validator), so LRU over the tree is not a stack algorithm and "
                       "the curve comes from replays at each capacity")  # fmt: skip
    return True, ""


def miss_ratio_curve(requests: Sequence[Request], page_tokens: int) -> MissRatioCurve:
    """One pass over ``requests``: the stack distance of every capped-prefix page (a Fenwick tree over touch
    times counts the pages touched since), O(pages log pages)."""
    trace = PageTrace(requests, page_tokens)
    total = trace.input_pages + 1
    tree = [0] * (total + 1)  # Fenwick tree: 1 at each page's latest touch time (lists: faster than numpy here)
    last: dict[int, int] = {}
    hits_at = [0] * (total + 1)
    clock = 0
    live = 0
    for path, cap in zip(trace.paths, trace.caps):
        # distances before this request touches anything: pages touched after p's latest touch, plus one
        for pid in path[:cap]:
            t = last.get(pid)
            if t is None:
                break  # never seen: neither it nor anything below it hits at any capacity
            s, i = 0, t
            while i > 0:
                s += tree[i]
                i -= i & -i
            hits_at[live - s + 1] += 1
        for pid in reversed(path):  # deepest first: a deeper page of the same request counts as older
            clock += 1
            t = last.get(pid)
            if t is None:
                live += 1
            else:
                i = t
                while i <= total:
                    tree[i] -= 1
                    i += i & -i
            last[pid] = clock
            i = clock
            while i <= total:
                tree[i] += 1
                i += i & -i
    n = live + 1
    return MissRatioCurve(np.asarray(hits_at[:n], dtype=np.int64), trace.input_pages, trace.input_tokens, page_tokens, live)
