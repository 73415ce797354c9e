"""The sliding-window (SWA) tree component of DeepSeek V4's radix cache, per node.

Every SWA rule of SGLang 0.5.23's ``UnifiedRadixCache`` lives here, as SGLang keeps it in its SWA component
(``mem_cache/unified_cache/components/swa.py``, cited below by line): a node's SWA state is either live (its
SWA pool pages are held) or a tombstone (Full KV only). Nodes are split wherever liveness changes, so one
flag per node is exact at page granularity.

- **Validator** (``swa.py:357-377``, applied in ``UnifiedTree.match``): walking down a match, a tombstone resets the live run to 0; a live node
  adds its tokens; a node is a valid match end once the run reaches the window. The run starts unbounded at
  the root, so a path that is live from the root is valid everywhere.
- **Branching** (``swa.py:379-420``): the page-aligned Full hit beyond the SWA-valid end.
- **LRU** (``unified_tree_core.py:213-390``): a list, not timestamps. A match or insert end moves the node and
  its ancestors within ``window + page`` tokens to the MRU end, nearest first; a split places the new parent
  just behind its child; a published window enters at the MRU end.
- **Locks** (``swa.py:836-933``): a request locks the run of nodes covering the window behind its node; the
  boundary node carries the lock's id, which a split hands to the new parent.
- **Insert** (``swa.py:456-650``): live SWA is published only at or beyond the request's SWA-evicted boundary
  (``window_start``), splitting a node there; a fresh leaf longer than one window-covering page run is split
  so a lock pins only that run; an overlapped tombstone the request recomputed inside its window is restored.
- **Out-of-window free** (``common.py:75-137``): a running request frees its own SWA behind
  ``pre_len - ceil(max(window, page))``, page-floored, never below what the tree owns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from sim.cache.v4.node import UNode

__all__ = ["SWALRU", "SWAComponent", "SWA_EVICTION_INTERVAL", "out_of_window_boundary", "swa_cap_tokens",
           "swa_tokens_per_request"]  # fmt: skip

SWA_EVICTION_INTERVAL = 128  # SGLANG_SWA_EVICTION_INTERVAL default (environ.py:730)
SWA_PREFIX_TAILS_PER_REQUEST = 4  # --swa-prefix-tails default: 4 x max_running_requests (pool_configurator.py:1309-1326)
CHUNKS_IN_FLIGHT = 2  # the overlap scheduler (on by default) holds two prefill chunks (pool_configurator.py:963)


def _ceil_to(x: int, page: int) -> int:
    return -(-x // page) * page


def out_of_window_boundary(evicted: int, pre_len: int, dead_lo: int, window: int, page: int) -> int:
    """A running request's new SWA-evicted boundary (``common.py:75-137``, prefix-sharing branch).

    *evicted*: the current boundary; *pre_len*: the last position the request still reads from; *dead_lo*: the
    lowest position it may free itself (its tree-owned prefix). Nothing moves until ``pre_len - window`` has
    passed ``evicted`` by at least one token; then everything behind ``pre_len - ceil(max(window, page))`` goes.
    """
    if pre_len - window < evicted + 1:
        return evicted
    if dead_lo > evicted:
        evicted = dead_lo
    threshold = pre_len - _ceil_to(window if window > page else page, page)
    new = threshold if threshold > evicted else evicted
    return new // page * page if page > 1 else new


def swa_tokens_per_request(window: int, page: int, draft_tokens: int = 1, decode_alloc: int | None = None) -> int:
    """SWA slots a running request holds at worst: the window, one eviction interval (per draft token), a page
    of padding that keeps the eviction point page-aligned, and the decode allocation: a page, or with
    speculative decoding its reserve (``pool_configurator.py:924-952``)."""
    return window + SWA_EVICTION_INTERVAL * draft_tokens + page + (page if decode_alloc is None else decode_alloc)


def swa_cap_tokens(window: int, page: int, max_running_requests: int, chunked_prefill_size: int,
                   draft_tokens: int = 1, decode_alloc: int | None = None) -> int:  # fmt: skip
    """DeepSeek V4's SWA pool in SGLang's cap mode: every running request at its worst, the prefill chunks in
    flight, a page, and room for 4 cached prefix tails per request slot, page-aligned
    (``pool_configurator.py:924-968, 1328-1351``). SGLang uses it when ``--max-running-requests`` is given
    and ``--swa-full-tokens-ratio`` is not; the Full pool gets the rest of the memory."""
    cap = (swa_tokens_per_request(window, page, draft_tokens, decode_alloc) * max_running_requests
           + CHUNKS_IN_FLIGHT * chunked_prefill_size + page)  # fmt: skip
    headroom = SWA_PREFIX_TAILS_PER_REQUEST * max_running_requests * (window + page)
    return _ceil_to(cap + headroom, page)


class SWALRU:
    """An intrusive doubly linked list over nodes' ``swa_prev``/``swa_next``; the head side is MRU."""

    __slots__ = ("head", "tail")

    def __init__(self, sentinel_factory: Callable[[], UNode]) -> None:
        self.head = sentinel_factory()
        self.tail = sentinel_factory()
        self.head.swa_next = self.tail
        self.tail.swa_prev = self.head

    @staticmethod
    def contains(node: UNode) -> bool:
        return node.swa_prev is not None

    def _link_after(self, prev: UNode, node: UNode) -> None:
        nxt = prev.swa_next
        assert nxt is not None  # every linked node (and the head) has one: the tail closes the list
        node.swa_prev, node.swa_next = prev, nxt
        nxt.swa_prev = node
        prev.swa_next = node

    def remove(self, node: UNode) -> None:
        prev, nxt = node.swa_prev, node.swa_next
        assert prev is not None and nxt is not None
        prev.swa_next = nxt
        nxt.swa_prev = prev
        node.swa_prev = node.swa_next = None

    def push_mru(self, node: UNode) -> None:
        self._link_after(self.head, node)

    def insert_after(self, prev: UNode, node: UNode) -> None:
        self._link_after(prev, node)

    def refresh_window(self, node: UNode | None, root: UNode, span: int) -> None:
        """Move ``node`` and its live ancestors within ``span`` tokens to the MRU end, nearest first."""
        prev = self.head
        acc = 0
        while node is not root and acc < span:
            assert node is not None
            if node.swa:
                self.remove(node)
                self._link_after(prev, node)
                prev = node
            acc += node.tokens
            node = node.parent

    def lru_unlocked(self, before: UNode | None = None) -> UNode | None:
        """The least recently used unlocked node older than ``before`` (default: the whole list)."""
        x = (before or self.tail).swa_prev
        while x is not self.head:
            assert x is not None
            if not x.swa_lock:
                break
            x = x.swa_prev
        return None if x is self.head else x

    def __iter__(self) -> Iterator[UNode]:
        x = self.head.swa_next
        while x is not self.tail:
            assert x is not None
            yield x
            x = x.swa_next


class HostLRU:
    """The SWA host LRU (``unified_tree_core.py:213-390``, the host list of the SWA component): nodes whose
    window state is on host only, oldest first. A node enters at the MRU end when its device SWA is freed with a
    host copy kept (``swa.py:719-736``); a split places the new parent just behind its child (``:665-681``).
    Intrusive, like :class:`SWALRU`: a circular list over nodes' ``host_prev``/``host_next`` through one
    sentinel, whose ``host_next`` is the LRU end and ``host_prev`` the MRU end."""

    __slots__ = ("head",)

    def __init__(self, sentinel_factory: Callable[[], UNode]) -> None:
        self.head = sentinel_factory()
        self.head.host_prev = self.head.host_next = self.head

    def __contains__(self, node: UNode) -> bool:
        return node.host_prev is not None

    def _link(self, before: UNode, node: UNode) -> None:
        """Link ``node`` just before ``before`` in LRU-first order."""
        p = before.host_prev
        assert p is not None  # a linked node (or the sentinel) has both neighbours
        node.host_prev, node.host_next = p, before
        p.host_next = node
        before.host_prev = node

    def push_mru(self, node: UNode) -> None:
        if node.host_prev is None:
            self._link(self.head, node)

    def insert_behind(self, child: UNode, node: UNode) -> None:
        """``node`` just older than ``child``."""
        if node.host_prev is None:
            self._link(child, node)

    def remove(self, node: UNode) -> None:
        p, n = node.host_prev, node.host_next
        if p is not None and n is not None:
            p.host_next = n
            n.host_prev = p
            node.host_prev = node.host_next = None

    def oldest_first(self) -> Iterator[UNode]:
        """Oldest first; where the caller removed the next node meanwhile, from the LRU end again."""
        head = self.head
        x = head.host_next
        while x is not head:
            assert x is not None
            nxt = x.host_next
            yield x
            x = nxt if nxt is not None and nxt.host_prev is not None else head.host_next


class SWAComponent:
    """SWA bookkeeping of one tree: the LRU, lock segments, and the evictable/protected ledgers (tokens).

    The tree (:class:`sim.cache.v4.unified.UnifiedTree`) holds it and hands it what it uses of the tree: the
    ``root``, the ``page``, a ``sentinel`` factory for its lists, and two calls back, ``split`` (split a node
    ``pages`` in) and ``update_leaf`` (refile a node whose last SWA lock went)."""

    def __init__(self, root: UNode, page: int, window: int, sentinel: Callable[[], UNode],
                 split: Callable[[UNode, int], UNode], update_leaf: Callable[[UNode], None]) -> None:  # fmt: skip
        self.root = root
        self.page = page
        self.window = window
        self.split = split
        self.update_leaf = update_leaf
        self.lru = SWALRU(sentinel)
        self.host_lru = HostLRU(sentinel)
        self.evictable = 0
        self.protected = 0
        self._uuids = itertools.count(1)

    # ----- matching -------------------------------------------------------------------------
    def unbacked_window(self, node: UNode | None) -> list[UNode]:
        """Nodes within the window behind ``node`` whose SWA is on device only, deepest first; the walk stops
        at a copy in flight or a gap (``swa.py:121-140``)."""
        root = self.root
        covered = 0
        out = []
        while node is not root and covered < self.window:
            assert node is not None
            if node.pending is not None or not (node.swa or node.host_swa):
                break
            covered += node.tokens
            if node.swa and not node.host_swa:
                out.append(node)
            node = node.parent
        return out

    # ----- values -----------------------------------------------------------------------------
    def publish(self, node: UNode) -> None:
        """Give ``node`` live SWA at the MRU end (``SWARebuild``, ``unified_tree_core.py:2958-2978``)."""
        node.swa = True
        self.host_lru.remove(node)
        self.lru.push_mru(node)
        if node.swa_lock:
            self.protected += node.tokens
        else:
            self.evictable += node.tokens

    def tombstone(self, node: UNode) -> int:
        """Free ``node``'s SWA; returns the tokens freed (``swa.py:698-734``)."""
        if not node.swa:
            return 0
        node.swa = False
        self.lru.remove(node)
        if node.host_swa:
            self.host_lru.push_mru(node)
        if node.swa_lock:
            self.protected -= node.tokens
        else:
            self.evictable -= node.tokens
        return node.tokens

    def on_split(self, new: UNode, child: UNode) -> None:
        """Redistribute on a split: locks copied, the boundary id moves up (``swa.py:609-690``)."""
        new.swa_lock = child.swa_lock
        new.swa = child.swa
        new.swa_uuid, child.swa_uuid = child.swa_uuid, None
        if new.host_swa and not new.swa:
            if child in self.host_lru:
                self.host_lru.insert_behind(child, new)
            else:
                self.host_lru.push_mru(new)

    # ----- insert -----------------------------------------------------------------------------
    def clip(self, node: UNode, start: int, end: int, window_start: int) -> UNode | None:
        """The part of a tombstoned span ``[start, end)`` at or beyond ``window_start``, split off as its own
        node; None if all of it is behind."""
        live = max(start, window_start)
        if live >= end:
            return None
        if live > start:
            self.split(node, (live - start) // self.page)
        return node

    def restore(self, node: UNode, start: int, end: int, window_start: int) -> None:
        """An insert that recomputed (or, on a host-only node, brought to the device) a tombstoned node inside
        its window gives it SWA again (``swa.py:551-589``); a locked node keeps its Full KV and only takes
        the SWA pages."""
        part = self.clip(node, start, end, window_start)
        if part is not None:
            self.publish(part)

    def populate(self, leaf: UNode, start: int, window_start: int) -> None:
        """Publish a new leaf's in-window SWA, capping the locked run at one window of pages
        (``swa.py:591-607, 622-660``)."""
        part = self.clip(leaf, start, start + leaf.tokens, window_start)
        if part is None:
            return
        page = self.page
        tail = -(-self.window // page) * page
        if part.swa_lock == 0 and part.tokens > tail:
            self.publish(self.split(part, (part.tokens - tail) // page))
        self.publish(part)

    # ----- locks ------------------------------------------------------------------------------
    def lock(self, node: UNode | None) -> int | None:
        """Lock the run of nodes covering the window behind ``node``; returns the boundary id."""
        root = self.root
        covered = 0
        uuid = None
        while node is not root and covered < self.window:
            assert node is not None
            if node.swa_lock == 0 and node.swa:
                self.evictable -= node.tokens
                self.protected += node.tokens
            node.swa_lock += 1
            covered += node.tokens
            if covered >= self.window:
                if node.swa_uuid is None:
                    node.swa_uuid = next(self._uuids)
                uuid = node.swa_uuid
            node = node.parent
        return uuid

    def unlock(self, node: UNode | None, uuid: int | None) -> None:
        root = self.root
        while node is not root:
            assert node is not None
            if node.swa_lock <= 0:
                raise RuntimeError(f"SWA unlock of an unlocked node {node!r}")
            if node.swa_lock == 1 and node.swa:
                self.evictable += node.tokens
                self.protected -= node.tokens
            node.swa_lock -= 1
            if node.swa_lock == 0 and not node.full_kids:
                self.update_leaf(node)
            if uuid is not None and node.swa_uuid == uuid:
                break
            node = node.parent
