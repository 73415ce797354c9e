"""DeepSeek V4's radix tree: SGLang 0.5.23's ``UnifiedTreeCore`` with a FULL and an SWA component.

This module is the tree core (``mem_cache/unified_cache/unified_tree_core.py``, cited by line unless a file is
named): nodes, match, insert, split. Its collaborators follow SGLang's seams: the FULL component's leaf sets,
LRU and locks (:mod:`sim.cache.v4.full`), the SWA component (:mod:`sim.cache.v4.swa`), the host tier
(:mod:`sim.cache.v4.hosttier`) and device eviction (:mod:`sim.cache.v4.evict`).

LRU time is SGLang's access counter, read where SGLang reads it: two ticks per new node (access and
creation time), one per node an insert walks, one for a split child, and one per match, whose path from the
match end up gets that time minus 1e-5 per level (``:1012-1036``). So eviction order matches SGLang's call
for call (``shared/vectors/v4``).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from sim.cache.ages import TierAges
from sim.cache.v4.evict import DeviceEviction
from sim.cache.v4.full import FullComponent
from sim.cache.v4.hosttier import HostTier
from sim.cache.v4.leaforder import LeafOrder
from sim.cache.v4.node import InsertOutcome, Match, PageKey, UNode, common_pages
from sim.cache.v4.swa import SWAComponent

__all__ = ["InsertOutcome", "Match", "UNode", "UnifiedTree"]


class UnifiedTree(DeviceEviction, HostTier, FullComponent):
    """FULL + SWA radix tree over page keys of ``page`` tokens with a ``window``-token sliding window."""

    def __init__(self, page: int, window: int, hicache: bool = False) -> None:
        self.page = page
        self.window = window
        self.hicache = hicache
        self.backup: Callable[[UNode], None] | None = None  # the controller's write-through hook
        self.evict_unbacked: Callable[[UNode, list[int]], None] | None = None  # default: delete
        self.back_up_window: Callable[[UNode], None] | None = None  # write_back: before tombstoning SWA
        self._ids = itertools.count()
        self._clock = 0.0
        self.ages: TierAges | None = None  # a clocked run's age records (sim.cache.ages)
        self.root = self._node([], None)
        self.root.host = True  # the root counts as backed up (an L3 read may start from it)
        self.root.lock = 1
        self.root.swa_lock = 1
        self.swa = SWAComponent(self.root, page, window, self.sentinel, self._split, self.update_leaf)
        self.full_evictable = 0
        self.full_protected = 0
        self.order = LeafOrder()  # device leaves
        self.host_order = LeafOrder()
        self.host_tokens = 0
        self.host_swa_tokens = 0
        self.counts: Counter = Counter()  # evicted_leaves, demotions, host_evictions
        self.events: list[dict] | None = None  # host-tier decisions in order (hicache-sim tree); None: off
        # write_back only: nodes with Full KV on both tiers, in the order they became so; host eviction reclaims
        # their host copies first (unified_tree_core.py:1604-1610, 1975-2030)
        self.duplicates: dict[UNode, None] | None = None
        self.num_nodes = 0

    def sentinel(self) -> UNode:
        return UNode([], None, -1, 0.0, self.page)

    def _tick(self) -> float:
        self._clock += 1
        return self._clock

    def _node(self, key: list[PageKey], parent: UNode | None) -> UNode:
        self._clock += 2  # access time, then creation time
        used = self.ages.clock.now if self.ages is not None else 0.0
        return UNode(key, parent, next(self._ids), self._clock - 1, self.page, used)

    # ----- keys and paths -----------------------------------------------------------------------
    def page_keys(self, tokens: Sequence[int]) -> list[PageKey]:
        """Whole pages of ``tokens`` (a partial last page is never cached)."""
        p = self.page
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) // p * p, p)]

    def path_up(self, node: UNode | None, stop: UNode | None = None) -> Iterator[UNode]:
        """``node`` and its ancestors up to (not including) ``stop`` or the root."""
        while node is not stop and node is not self.root:
            assert node is not None
            yield node
            node = node.parent

    def ref(self, node: UNode) -> list[int]:
        """``[start, end, last]``: the node's token span on its root path and its last token id."""
        start, x = 0, node.parent
        while x is not None and x is not self.root:
            start += x.tokens
            x = x.parent
        return [start, start + node.tokens, cast(tuple, node.key[-1])[-1]]  # token-id pages (tree calls)

    def paths(self) -> list[list[UNode]]:
        """Every root-to-leaf path, as its nodes."""
        out: list[list[UNode]] = []
        stack = [(c, [c]) for c in self.root.children.values()]
        while stack:
            node, path = stack.pop()
            if not node.children:
                out.append(path)
            stack.extend((c, path + [c]) for c in node.children.values())
        return out

    # ----- match ------------------------------------------------------------------------------
    def match(self, keys: Sequence[PageKey]) -> Match:
        """Longest SWA-valid prefix of ``keys`` (``:905-1068``); splits a partly matched node and refreshes
        the LRU from the match end up. The walk stops at a dead node (neither on device nor on host)."""
        node = best = dev = root = self.root
        pos, n, dev_pages, best_pages = 0, len(keys), 0, 0
        hicache, window = self.hicache, self.window
        # the SWA validator (swa.py:357-377) on device or host (a load-back restores it), and on device only
        run_any: int | float = float("inf")
        run_dev: int | float = run_any
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.full or child.host):
                break
            matched = common_pages(child.key, keys, pos)
            pos += matched
            partial = matched < len(child.key)
            node = self._split(child, matched) if partial else child
            ok = False
            if hicache and (node.swa or node.host_swa):
                run_any += node.tokens
                ok = run_any >= window and (node.full or node.host)
            elif hicache:
                run_any = 0
            if node.swa:
                run_dev += node.tokens
                if run_dev >= window and node.full:
                    dev, dev_pages = node, pos
                    ok = True
            else:
                run_dev = 0
            if ok:
                best, best_pages = node, pos
            if partial:
                break
        if best is not root:
            self.swa.lru.refresh_window(best, root, window + self.page)
        self.touch_path(best, self._tick())
        device = dev_pages * self.page
        host = _host_only(best, dev) if hicache else 0
        aligned = pos * self.page
        branch = aligned if aligned > device + host else None
        swa_host = self._swa_host(best) if hicache else 0
        return Match(device, dev, aligned, branch, best, best_pages * self.page, host, swa_host)

    def peek(self, keys: Sequence[PageKey]) -> tuple[int, int]:
        """(device pages, device-or-host pages) of the raw prefix of ``keys``, changing nothing: a router's
        estimate, without the window check."""
        node, pos, n, dev = self.root, 0, len(keys), 0
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.full or child.host):
                break
            matched = common_pages(child.key, keys, pos)
            pos += matched
            if child.full:
                dev = pos
            if matched < len(child.key):
                break
            node = child
        return dev, pos

    # ----- insert -----------------------------------------------------------------------------
    def insert(
        self,
        keys: Sequence[PageKey],
        *,
        prev_prefix: int,
        inserted: int,
        window_start: int,
        branching: int | None = None,
    ) -> InsertOutcome:
        """Insert a request's page-aligned key (``:1129-1465``).

        *prev_prefix*: tokens the request already holds from the tree; *inserted*: tokens it inserted before
        (their hit counts are not raised again); *window_start*: its SWA-evicted boundary (SWA below it is
        gone, so only the part at or beyond it is published or restored).
        """
        page, root, swa = self.page, self.root, self.swa
        root.last_access = self._tick()
        node, pos, n = root, 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            self._clock += 1
            child.last_access = self._clock
            if not child.full:  # a new time: a leaf files its new key (update_leaf, inlined for device nodes)
                self.update_leaf(child)
            elif not (child.lock or child.swa_lock or child.full_kids):
                self.order.file(child, self._clock)
            matched = common_pages(child.key, keys, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            start = pos * page
            end = start + child.tokens
            fresh = not child.full  # host-only: the request's fresh KV becomes its device copy (``:1564-1590``)
            if fresh:
                self._unevict(child)
            if not child.swa and (fresh or prev_prefix < end):
                swa.restore(child, start, end, window_start)
            if end > inserted:
                self._hit(child)
            node = child
            pos += matched
        prefix = pos * page
        target, new_leaf = node, pos < n
        if new_leaf:
            target = self._add_leaf(node, list(keys[pos:]))
            swa.populate(target, prefix, window_start)
        branch_inserted = branching is not None and n * page >= branching
        if target is not root:
            swa.lru.refresh_window(target, root, self.window + page)
            if new_leaf:
                if n * page > inserted:
                    self._hit(target)
            elif (self.hicache and target.host and target.pending is None and self.backup is not None
                  and swa.unbacked_window(target)):  # an existing backed node whose window is new
                self.backup(target)
        return InsertOutcome(prefix, target, branch_inserted)

    def _hit(self, node: UNode) -> None:
        """Count a hit; with a write-through policy, back the node up once it reaches the threshold
        (``_inc_hit_count_and_check``, ``:1104-1123``)."""
        node.hit_count += 1
        if self.hicache and self.backup is not None and not node.host:
            self.backup(node)

    def _add_leaf(self, parent: UNode, key: list[PageKey]) -> UNode:
        leaf = self._node(key, parent)
        parent.children[key[0]] = leaf
        parent.full_kids += 1
        self.num_nodes += 1
        self.full_evictable += leaf.tokens
        self.update_leaf(leaf)
        self.update_leaf(parent)
        return leaf

    def _split(self, child: UNode, pages: int) -> UNode:
        """Split ``child`` after ``pages`` pages; returns the new parent (``:1467-1530``)."""
        parent = child.parent
        assert parent is not None
        new = self._node(child.key[:pages], parent)
        child.key = child.key[pages:]
        new.children[child.key[0]] = child
        parent.children[new.key[0]] = new
        child.parent = new
        new.hit_count, new.used = child.hit_count, child.used
        new.tokens = len(new.key) * self.page
        child.tokens -= new.tokens
        new.lock = child.lock
        new.full, new.host, new.host_swa = child.full, child.host, child.host_swa  # a host lock stays on its anchor
        new.full_kids = 1 if child.full else 0
        if child.pending is not None:  # both halves wait for the same copy
            new.pending = child.pending
            child.pending.nodes.append(new)
        new.loading = child.loading
        self.swa.on_split(new, child)
        if self.duplicates is not None:
            self.settle(new)
        if new.swa:
            self.swa.lru.insert_after(child, new)
        child.last_access = self._tick()
        self.num_nodes += 1
        self.update_leaf(child)  # same leaf status, a new time; the new parent has a child, so is no leaf
        return new

    # ----- inspection -------------------------------------------------------------------------
    @property
    def full_tokens(self) -> int:
        return self.full_evictable + self.full_protected

    @property
    def swa_tokens(self) -> int:
        return self.swa.evictable + self.swa.protected


def _host_only(node: UNode, stop: UNode) -> int:
    """Full tokens held only on host from ``node`` up to (not including) its ancestor ``stop``."""
    host = 0
    while node is not stop and node.parent is not None:
        if node.host:
            host += node.tokens
        node = node.parent
    return host
