"""A page-keyed radix tree with device (L1) and host (L2) residency, lock refs and two LRU orders.

The tree owns structure and bookkeeping only: which nodes exist, which tier holds them, who locks them,
and in what order they would be evicted. It never allocates or frees memory; :mod:`sim.cache.hicache` decides
that and calls the residency transitions here (``demote``, ``delete_leaf``, ``set_host``...). This mirrors
SGLang's split of ``RadixCache``/``UnifiedTreeCore`` (tree decides, cache executes).

Keys are *page keys*: a page of ``page_size`` token ids (a tuple, or the id itself when ``page_size`` is 1),
or a pre-hashed block id from a trace. LRU time is a logical clock read exactly where SGLang 0.5.23's
``RadixCache`` reads ``time.monotonic()``, so eviction order matches SGLang's call for call
(``shared/vectors``).

Invariants kept here:
- device residency is prefix-closed (a device node's ancestors are on device), because only device
  leaves are demoted or deleted;
- ``evictable_tokens + protected_tokens`` is the number of device-resident tokens;
- a node is in the device LRU iff it is on device, unlocked, and has no device child; in the host LRU
  iff it is host-only, host-unlocked, and childless.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.cache.eviction import PriorityOrder

__all__ = ["InsertResult", "MatchResult", "Node", "RadixTree", "node_ref"]

PageKey = Hashable


class Node:
    """One run of pages."""

    __slots__ = (
        "key", "parent", "children", "id", "last_access", "hit_count",
        "device", "host", "lock_ref", "host_lock_ref", "dev_children",
        "dev_mask", "host_mask", "pending", "loading",
    )  # fmt: skip
    # Sliding-window state on host: only V4's tree has any (sim.cache.v4.unified); the engine's L3 write asks it of
    # every node a backup copied, whichever cache made the backup.
    host_swa = 0

    def __init__(self, key: list[PageKey], parent: Node | None, node_id: int, now: int) -> None:
        self.key = key
        self.parent = parent
        # NOTE: a plain dict: a defaultdict would create children on lookup.
        self.children: dict[PageKey, Node] = {}
        self.id = node_id
        self.last_access = now
        self.hit_count = 0
        self.device = True
        self.host = False
        self.lock_ref = 0
        self.host_lock_ref = 0
        self.dev_children = 0
        self.dev_mask = 0  # which pools hold this node on device / host (set by sim.cache.hicache)
        self.host_mask = 0
        self.pending = None  # the in-flight write-through backup covering this node, if any
        self.loading = False  # a load-back into this node not yet acknowledged

    @property
    def pages(self) -> int:
        return len(self.key)

    def __repr__(self) -> str:
        tiers = ("D" if self.device else "") + ("H" if self.host else "")
        return f"Node(id={self.id}, pages={len(self.key)}, {tiers or 'dead'}, lock={self.lock_ref})"


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


class RadixTree:
    """The tree, usable on its own (``insert``/``match``/``evict`` as SGLang's ``RadixCache``) or driven
    by :class:`sim.cache.hicache.HiCache` with a host tier.

    *page_size*: tokens per page key. *one_page_nodes*: every node holds exactly one page, as in SGLang's
    policy simulator (``benchmark/hicache/hicache_policy_simulator.py``), so eviction takes single pages; SGLang's
    server trees (the default) keep runs of pages and evict whole nodes.
    """

    def __init__(self, page_size: int = 1, *, one_page_nodes: bool = False) -> None:
        if page_size <= 0:
            raise ValueError("page_size must be > 0")
        self.page_size = page_size
        self.one_page_nodes = one_page_nodes
        self._ids = itertools.count()
        self._clock = 0
        self.root = Node([], None, next(self._ids), self._tick())
        self._tick()  # SGLang's TreeNode reads the clock twice (access and creation time)
        self.root.lock_ref = 1
        self.root.host = True
        self.evictable_tokens = 0
        self.protected_tokens = 0
        self.host_tokens = 0
        self._dev_heap: list[tuple[int, int, Node]] = []
        self._host_heap: list[tuple[int, int, Node]] = []
        self._dev_order: PriorityOrder | None = None  # None: LRU on the heap above
        self.on_split: Callable[[Node], None] | None = None  # told of each new parent a split makes
        self.num_nodes = 1

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

    def _new_node(self, key: list[PageKey], parent: Node) -> Node:
        node = Node(key, parent, next(self._ids), self._tick())
        self._tick()
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

    # ----- locks ------------------------------------------------------------------------------
    def lock(self, node: Node) -> None:
        """Protect ``node`` and its ancestors from device eviction."""
        page = self.page_size
        while node is not self.root:
            if node.lock_ref == 0 and node.device:
                t = len(node.key) * page
                self.evictable_tokens -= t
                self.protected_tokens += t
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        page = self.page_size
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"unlock of an unlocked node {node!r}")
            node.lock_ref -= 1
            if node.lock_ref == 0 and node.device:
                t = len(node.key) * page
                self.evictable_tokens += t
                self.protected_tokens -= t
                self._push_dev_if_leaf(node)
            node = node.parent

    def host_lock(self, node: Node) -> None:
        """Keep ``node``'s host copy: only the node itself is pinned, its ancestors are no host leaves while it
        is there (``unified_cache/components/full.py:290-301``)."""
        if node is not self.root:
            node.host_lock_ref += 1

    def host_unlock(self, node: Node) -> None:
        if node is not self.root:
            node.host_lock_ref -= 1
            if node.host_lock_ref == 0:
                self._push_host_if_leaf(node)

    # ----- residency transitions (called by the controller) -------------------------------------
    def revive(self, node: Node) -> None:
        """Make a host-only node device-resident again (loaded back, or recomputed by a request)."""
        node.device = True  # no longer host-only: it leaves the host LRU lazily
        self._on_device_added(node)

    def _on_device_added(self, node: Node) -> None:
        t = len(node.key) * self.page_size
        if node.lock_ref:
            self.protected_tokens += t
        else:
            self.evictable_tokens += t
        parent = node.parent
        parent.dev_children += 1
        self._push_dev_if_leaf(node)

    def _on_device_removed(self, node: Node) -> None:
        node.device = False
        node.dev_mask = 0
        self.evictable_tokens -= len(node.key) * self.page_size
        parent = node.parent
        parent.dev_children -= 1
        if parent.dev_children == 0:
            self._push_dev_if_leaf(parent)

    def demote(self, node: Node) -> None:
        """Free ``node``'s device copy; it stays in the tree as host-only."""
        self._on_device_removed(node)
        self._push_host_if_leaf(node)

    def delete_leaf(self, node: Node) -> None:
        """Remove a childless node from the tree, from whichever tiers hold it."""
        if node.children:
            raise RuntimeError(f"delete of a node with children {node!r}")
        if node.device:
            self._on_device_removed(node)
        if node.host:
            self.host_tokens -= len(node.key) * self.page_size
            node.host = False
            node.host_mask = 0
        parent = node.parent
        del parent.children[node.key[0]]
        node.parent = None
        self.num_nodes -= 1
        if not parent.children:
            self._push_host_if_leaf(parent)

    def set_host(self, node: Node, mask: int) -> None:
        """Record a host copy of ``node`` in the pools of ``mask``."""
        node.host = True
        node.host_mask = mask
        self.host_tokens += len(node.key) * self.page_size

    def clear_host(self, node: Node) -> None:
        """Drop the host copy of a node that stays on device (a duplicate given up for L2 room)."""
        if not node.device:
            raise RuntimeError(f"clear_host of a host-only node {node!r}: delete it instead")
        node.host = False
        node.host_mask = 0
        self.host_tokens -= len(node.key) * self.page_size

    # ----- LRU orders -------------------------------------------------------------------------
    def use_eviction_order(self, order: PriorityOrder | None) -> None:
        """Order device victims by ``order`` (:mod:`sim.cache.eviction`, SGLang's ``--radix-eviction-policy``)
        instead of LRU; only on an empty tree."""
        if self.num_nodes != 1:
            raise RuntimeError("the eviction order is chosen before anything is cached")
        self._dev_order = order

    def _push_dev_if_leaf(self, node: Node) -> None:
        if node is not self.root and _dev_evictable(node):
            if self._dev_order is None:
                self._file(self._dev_heap, node, _dev_evictable)
            else:
                self._dev_order.push(node, self.num_nodes, _dev_evictable)

    def _push_host_if_leaf(self, node: Node) -> None:
        if node is not self.root and _host_evictable(node):
            self._file(self._host_heap, node, _host_evictable)

    def _file(self, heap: list, node: Node, still_valid) -> None:
        """Push ``node`` at its current time; stale entries are skipped on pop and compacted when they
        dominate, so each operation stays O(log n) amortised."""
        heapq.heappush(heap, (node.last_access, node.id, node))
        if len(heap) > 4 * self.num_nodes + 1024:
            _compact(heap, still_valid)

    def refile(self, node: Node) -> None:
        """Re-file ``node`` in whichever LRU order it belongs to, after its access time changed."""
        if node.device:
            if node.lock_ref == 0 and node.dev_children == 0:
                self._push_dev_if_leaf(node)
        elif not node.children and node.host_lock_ref == 0:
            self._push_host_if_leaf(node)

    def device_victims(self) -> Iterator[Node]:
        """Evictable device leaves, least recently used first, as the tree changes under the caller.

        The caller must demote or delete each node it takes before asking for the next one; a parent
        that becomes a leaf joins the order with its own (older) time.
        """
        if self._dev_order is not None:
            return self._dev_order.victims(_dev_evictable)
        return _pop_valid(self._dev_heap, _dev_evictable)

    def host_victims(self) -> Iterator[Node]:
        """Evictable host leaves (host-only, childless, unlocked), least recently used first.

        As with :meth:`device_victims`, the caller deletes each node before asking for the next.
        """
        return _pop_valid(self._host_heap, _host_evictable)

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

    def device_tokens(self) -> int:
        return self.evictable_tokens + self.protected_tokens

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


def _dev_evictable(node: Node) -> bool:
    return node.device and node.lock_ref == 0 and node.dev_children == 0


def _host_evictable(node: Node) -> bool:
    return node.host and not node.device and not node.children and node.host_lock_ref == 0 and node.pending is None


def _pop_valid(heap: list, still_valid) -> Iterator[Node]:
    """Pop entries least recent first, yielding those still current (time unchanged, node in the tree)."""
    while heap:
        t, _, node = heapq.heappop(heap)
        if node.last_access == t and node.parent is not None and still_valid(node):
            yield node


def _compact(heap: list, still_valid) -> None:
    """Drop stale entries in place once they dominate, keeping operations O(log n) amortised."""
    heap[:] = [e for e in heap if e[2].parent is not None and e[0] == e[2].last_access and still_valid(e[2])]
    heapq.heapify(heap)


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
