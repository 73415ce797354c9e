"""A page-keyed radix tree with device (L1) and host (L2) residency, lock refs and two LRU orders.

The tree owns structure and bookkeeping only: which nodes exist, which tier holds them, who locks them,
and in what order they would be evicted. It never allocates or frees memory; :mod:`sim.cache.hicache` decides
that and calls the residency transitions (``demote``, ``delete_leaf``, ``set_host``...). This mirrors
SGLang's split of ``RadixCache``/``UnifiedTreeCore`` (tree decides, cache executes). The structure (match,
insert, split) is here; locks, residency and the LRU orders are its base, :class:`sim.cache.residency.TreeResidency`;
the node itself is :class:`sim.cache.node.Node`.

Keys are *page keys*: a page of ``page_size`` token ids (a tuple, or the id itself when ``page_size`` is 1),
or a pre-hashed block id from a trace. LRU time is a logical clock read exactly where SGLang 0.5.23's
``RadixCache`` reads ``time.monotonic()``, so eviction order matches SGLang's call for call
(``shared/vectors``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sim.cache.ages import TierAges
from sim.cache.node import Node, PageKey
from sim.cache.residency import TreeResidency

__all__ = ["InsertResult", "MatchResult", "RadixTree", "node_ref"]


@dataclass(frozen=True)
class MatchResult:
    """What a lookup found, in pages.

    ``device_pages``/``device_node``: the deepest prefix resident on device. ``best_pages``/``best_node``:
    the deepest prefix on device or host (host hit = best - device).
    """

    device_pages: int
    best_pages: int
    device_node: Node
    best_node: Node


@dataclass(frozen=True)
class InsertResult:
    """``prefix_pages``: pages that were already in the tree; ``path``: the nodes covering the key."""

    prefix_pages: int
    inserted_pages: int
    path: list[Node]
    revived: list[Node]


class RadixTree(TreeResidency):
    """The tree, usable on its own (``insert``/``match``/``evict`` as SGLang's ``RadixCache``) or driven
    by :class:`sim.cache.hicache.HiCache` with a host tier.

    *page_size*: tokens per page key. *one_page_nodes*: every node holds exactly one page, as in SGLang's
    policy simulator (``benchmark/hicache/hicache_policy_simulator.py``), so eviction takes single pages; SGLang's
    server trees (the default) keep runs of pages and evict whole nodes.
    """

    def __init__(self, page_size: int = 1, *, one_page_nodes: bool = False) -> None:
        if page_size <= 0:
            raise ValueError("page_size must be > 0")
        super().__init__(page_size)
        self.one_page_nodes = one_page_nodes
        self._ids = itertools.count()
        self._clock = 0
        self.ages: TierAges | None = None  # a clocked run's age records (sim.cache.ages)
        self.num_nodes = 0
        self.root = self._new_node([], None)
        self.root.lock_ref = 1
        self.root.host = True
        self.on_split: Callable[[Node], None] | None = None  # told of each new parent a split makes

    # ----- keys -------------------------------------------------------------------------------
    def page_keys(self, tokens: Sequence[int]) -> list[PageKey]:
        """Whole pages of ``tokens`` as page keys (a trailing partial page is dropped, as SGLang does)."""
        p = self.page_size
        if p == 1:
            return list(tokens)
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) // p * p, p)]

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _new_node(self, key: list[PageKey], parent: Node | None) -> Node:
        node = Node(key, parent, next(self._ids), self._tick())
        self._tick()
        if self.ages is not None:
            node.used = self.ages.clock.now
        self.num_nodes += 1
        return node

    # ----- lookup -----------------------------------------------------------------------------
    def match(self, keys: Sequence[PageKey], max_pages: int | None = None) -> MatchResult:
        """Longest cached prefix of ``keys``; refreshes LRU time along the path and may split a node.

        The walk stops at a dead node (neither on device nor on host).
        """
        if max_pages is not None and max_pages < len(keys):
            keys = keys[:max_pages]
        now = self._tick()
        node = self.root
        node.last_access = now
        pos = 0
        n = len(keys)
        dev_pages, dev_node = 0, node
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.device or child.host):
                break
            node, matched, whole = self._enter(child, keys, pos, now)
            pos += matched
            if node.device:
                dev_pages, dev_node = pos, node
            if not whole:
                break
        return MatchResult(dev_pages, pos, dev_node, node)

    def _enter(self, child: Node, keys: Sequence[PageKey], pos: int, now: int) -> tuple[Node, int, bool]:
        """Stamp ``child`` as used and split it where ``keys`` diverge from it.

        Returns the node covering the matched part, the pages matched, and whether all of ``child`` matched.
        """
        child.last_access = now
        clen = len(child.key)
        if child.key == keys[pos : pos + clen]:
            self.refile(child)
            return child, clen, True
        matched = _common_prefix(child.key, keys, pos)
        self.refile(child)
        node = self._split(child, matched)
        self.refile(node)
        return node, matched, False

    def peek(self, keys: Sequence[PageKey], max_pages: int | None = None) -> tuple[int, int]:
        """(device pages, device-or-host pages) of the prefix of ``keys``, changing nothing (no LRU
        refresh, no split): a router's estimate."""
        if max_pages is not None and max_pages < len(keys):
            keys = keys[:max_pages]
        node, pos, n, dev = self.root, 0, len(keys), 0
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.device or child.host):
                break
            clen = len(child.key)
            matched = clen if child.key == keys[pos : pos + clen] else _common_prefix(child.key, keys, pos)
            pos += matched
            if child.device:
                dev = pos
            if matched < clen:
                break
            node = child
        return dev, pos

    # ----- insert -----------------------------------------------------------------------------
    def insert(self, keys: Sequence[PageKey], *, device: bool = True) -> InsertResult:
        """Cache ``keys``: bump hit counts on the matched path and add a device leaf for the rest.

        Matched nodes that were not on device are made device-resident again (``revived``): the
        request has just computed or loaded their KV. With ``device=False`` (pages prefetched from
        storage into host memory) the new leaf is host-only, and nothing is revived or counted as a hit.
        """
        now = self._tick()
        node = self.root
        node.last_access = now
        pos, n = 0, len(keys)
        path: list[Node] = []
        revived: list[Node] = []
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            child, matched, _ = self._enter(child, keys, pos, now)
            if device:
                child.hit_count += 1
                if not child.device:
                    self.revive(child)
                    revived.append(child)
            path.append(child)
            node = child
            pos += matched
        prefix = pos
        runs = [keys[i : i + 1] for i in range(pos, n)] if self.one_page_nodes else [keys[pos:]] if pos < n else []
        for run in runs:
            leaf = self._new_node(list(run), node)
            node.children[leaf.key[0]] = leaf
            if device:
                leaf.hit_count = 1
                self._on_device_added(leaf)
            else:
                leaf.device = False  # host-only: the caller records its host copy with set_host
            path.append(leaf)
            node = leaf
        return InsertResult(prefix, n - prefix, path, revived)

    def _split(self, child: Node, pages: int) -> Node:
        """Split ``child`` after ``pages`` pages; the new parent inherits residency, locks, hit count."""
        parent = child.parent
        new = self._new_node(child.key[:pages], parent)
        child.key = child.key[pages:]
        new.children[child.key[0]] = child
        parent.children[new.key[0]] = new
        child.parent = new
        new.hit_count = child.hit_count
        new.used = child.used
        new.device, new.host = child.device, child.host
        new.dev_mask, new.host_mask = child.dev_mask, child.host_mask
        new.lock_ref, new.host_lock_ref = child.lock_ref, child.host_lock_ref
        new.loading = child.loading
        new.dev_children = 1 if child.device else 0
        if child.pending is not None:
            new.pending = child.pending
            child.pending.nodes.append(new)
        if self.on_split is not None:
            self.on_split(new)
        return new

    # ----- device-only convenience, the RadixCache API -------------------------------------------
    def evict(self, num_tokens: int) -> tuple[int, int]:
        """Delete LRU device leaves until at least ``num_tokens`` are freed: (tokens freed, leaves)."""
        freed = leaves = 0
        if num_tokens <= 0:
            return 0, 0
        for node in self.device_victims():
            freed += len(node.key) * self.page_size
            leaves += 1
            if node.host:
                self.demote(node)
            else:
                self.delete_leaf(node)
            if freed >= num_tokens:
                break
        return freed, leaves

    # ----- inspection -------------------------------------------------------------------------
    def nodes(self) -> Iterator[Node]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def paths(self) -> list[list[PageKey]]:
        """Root-to-leaf key sequences of device-resident nodes, sorted (SGLang's ``state`` view)."""
        out: list[list[PageKey]] = []

        def walk(node: Node, prefix: list[PageKey]) -> None:
            kids = [c for c in node.children.values() if c.device]
            if not kids and node is not self.root:
                out.append(prefix)
            for child in kids:
                walk(child, prefix + child.key)

        walk(self.root, [])
        return sorted(out)


def _common_prefix(key: list[PageKey], keys: Sequence[PageKey], pos: int) -> int:
    i = 0
    for a, b in zip(key, keys[pos : pos + len(key)]):
        if a != b:
            break
        i += 1
    return i


def node_ref(node: Node, page: int) -> list[int]:
    """``[start, end, last]``: the node's token positions on its root path and the token id at ``end - 1``."""
    start, x = 0, node.parent
    while x is not None and x.parent is not None:
        start += len(x.key)
        x = x.parent
    last = node.key[-1]
    if page > 1:
        last = last[-1]
    return [start * page, (start + len(node.key)) * page, last]
