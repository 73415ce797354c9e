"""The host tier of DeepSeek V4's tree: host copies, host locks, host eviction, L3 reads placed as host nodes.

SGLang keeps these in ``UnifiedTreeCore``'s HiCache part (``unified_tree_core.py:1931-2077, 2387-2490,
2694-2733``; bare line numbers below are that file's): a backup marks a node's Full KV and its window's state
as on host, a device victim with a host copy is demoted rather than deleted, host eviction frees least
recently used host-only leaves (under write_back, host copies of Full KV also on device first), and the SWA
host pool frees its own oldest window state. :class:`HostTier` is a base of
:class:`~sim.cache.v4.unified.UnifiedTree` and works on its state.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mypy_extensions import trait

from sim.cache.ages import landed
from sim.cache.v4.full import is_host_leaf, is_leaf
from sim.cache.v4.node import PageKey, UNode, common_pages
from sim.cache.v4.treestate import TreeState

__all__ = ["HostTier"]


@trait
class HostTier(TreeState):
    """Host ledgers (``host_tokens``, ``host_swa_tokens``) and the calls that move them."""


    # ----- host copies ----------------------------------------------------------------------------
    def set_host(self, node: UNode, swa_nodes: Sequence[UNode]) -> None:
        """Record a backup: ``node``'s Full KV and the window state of ``swa_nodes`` now have host copies."""
        if not node.host:
            node.host = True
            self.host_tokens += node.tokens
        for x in swa_nodes:
            if not x.host_swa:
                x.host_swa = True
                self.host_swa_tokens += x.tokens
                if not x.swa:
                    self.swa.host_lru.push_mru(x)

    def _free_host(self, node: UNode) -> None:
        if node.host:
            self.host_tokens -= node.tokens
            node.host = False
        if node.host_swa:
            self.host_swa_tokens -= node.tokens
            node.host_swa = False
            self.swa.host_lru.remove(node)

    def settle(self, node: UNode) -> None:
        """Track ``node`` as a duplicate if its Full KV is on both tiers with no copy in flight (write_back)."""
        if self.duplicates is not None and node.full and node.host and node.pending is None and node.loading is None:
            self.duplicates.setdefault(node)

    def load(self, node: UNode) -> None:
        """A host-only node's Full KV loaded back to the device (``commit_load_back``, ``:2694-2733``)."""
        self._unevict(node)

    def _unevict(self, node: UNode) -> None:
        node.full = True
        if self.duplicates is not None and node.loading is None:
            self.settle(node)
        parent = node.parent
        assert parent is not None
        parent.full_kids += 1
        if node.lock:
            self.full_protected += node.tokens
        else:
            self.full_evictable += node.tokens
        self.update_leaf(node)
        self.update_leaf(parent)

    def insert_host(self, keys: Sequence[PageKey], window_pages: int) -> int:
        """Place pages read from L3 as a host-only leaf, the last ``window_pages`` of them with their window
        state (``:2395-2490``); returns the pages added. Pages already in the tree are left as they are."""
        node, pos, n = self.root, 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            matched = common_pages(child.key, keys, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            node, pos = child, pos + matched
        if pos >= n:
            return 0
        leaf = self._node(list(keys[pos:]), node)
        leaf.full = False
        if self.ages is not None:
            leaf.used = landed(self.ages.clock.now)
        node.children[leaf.key[0]] = leaf
        self.num_nodes += 1
        if 0 < window_pages < len(leaf.key):
            self.set_host(self._split(leaf, len(leaf.key) - window_pages), [])
        self.set_host(leaf, [leaf] if window_pages else [])
        self.update_leaf(leaf)
        self.update_leaf(node)
        return n - pos

    def _swa_host(self, node: UNode | None) -> int:
        """Window tokens behind ``node`` that are only on host (what a load-back must bring in)."""
        n = host = 0
        while node is not self.root and n < self.window:
            assert node is not None
            if node.swa:
                n += node.tokens
            elif node.host_swa:
                n += node.tokens
                host += node.tokens
            else:
                break
            node = node.parent
        return host

    # ----- host locks -----------------------------------------------------------------------------
    def _host_run(self, node: UNode | None) -> Iterator[UNode]:
        """``node`` and the ancestors that cover the window behind it: what a host lock pins (the Full component
        pins its anchor alone, ``components/full.py:290-301``; the SWA component the window run, ``swa.py:849-895``)."""
        covered = 0
        while node is not self.root and covered < self.window:
            assert node is not None
            yield node
            covered += node.tokens
            node = node.parent

    def host_lock_path(self, node: UNode) -> None:
        """Keep ``node``'s host copies from host eviction while a load-back or an L3 read uses them."""
        for x in self._host_run(node):
            x.host_lock += 1

    def host_unlock_path(self, node: UNode) -> None:
        for x in self._host_run(node):
            x.host_lock -= 1
            if not x.host_lock:
                self.update_leaf(x)

    # ----- host eviction --------------------------------------------------------------------------
    def _reclaim(self, duplicates: dict[UNode, None], tokens: int, nodes: list[list[int]]) -> int:
        """Give up host copies of Full KV also on the device, sparing evictable device leaves in a first pass;
        only the Full host layer goes, window state stays (``unified_tree_core.py:1975-2040``). ``duplicates``
        keeps SGLang's dict order (``full_host_duplicates``, ``:531, 1604-1610``): insertion by ``setdefault``,
        lazy removal when this walk passes an entry stale or releases it."""
        freed = 0
        for spare in (True, False):
            for x in list(duplicates):
                if freed >= tokens:
                    return freed
                if x.parent is None or not (x.full and x.host):
                    del duplicates[x]
                    continue
                if x.pending is not None or x.loading is not None or x.host_lock or (spare and is_leaf(x)):
                    continue
                if self.events is not None:
                    nodes.append(self.ref(x))
                freed += x.tokens
                if self.ages is not None:
                    self.ages.evicted("host", x.used, x.tokens, x.hit_count)
                x.host = False
                self.host_tokens -= x.tokens
                del duplicates[x]
        return freed

    def evict_host(self, tokens: int) -> int:
        """Delete least recently used host leaves until ``tokens`` host tokens are freed (``:1931-1960``)."""
        freed = 0
        tracker = [0, 0]
        nodes: list[list[int]] = []
        if self.duplicates is not None:
            freed = self._reclaim(self.duplicates, tokens, nodes)
        while freed < tokens:
            node = self.pop_host_leaf()
            if node is None:
                break
            if self.events is not None:
                nodes.append(self.ref(node))
            freed += node.tokens
            self.counts["host_evictions"] += 1
            if self.ages is not None:
                self.ages.evicted("host", node.used, node.tokens, node.hit_count)
            parent = node.parent
            assert parent is not None
            self._remove(node, tracker)
            if parent is not self.root:
                self.update_leaf(parent)
        if self.events is not None:
            self.events.append({"host_evict": tokens, "got": freed, "nodes": sorted(nodes)})
        return freed

    def evict_host_swa(self, tokens: int) -> int:
        """Free at least ``tokens`` of the SWA host pool, oldest host-only window first: a host leaf goes whole,
        any other node loses only its host window state (``components/swa.py:1495-1549``)."""
        freed = 0
        tracker = [0, 0]
        for x in self.swa.host_lru.oldest_first():
            if freed >= tokens:
                break
            if x.host_lock or x.parent is None:
                continue
            freed += x.tokens
            if is_host_leaf(x):
                self.counts["host_evictions"] += 1
                if self.ages is not None:
                    self.ages.evicted("host", x.used, x.tokens, x.hit_count)
                parent = x.parent
                self._remove(x, tracker)
                if parent is not self.root:
                    self.update_leaf(parent)
            else:
                self.host_swa_tokens -= x.tokens
                x.host_swa = False
                self.swa.host_lru.remove(x)
                self.update_leaf(x)
        if self.events is not None:
            self.events.append({"host_evict": tokens, "got": freed, "pool": "swa"})
        return freed
