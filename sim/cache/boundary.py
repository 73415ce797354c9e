"""The L1/L2 boundary write policy (``write_policy: boundary``): keep duplicates only where L1 meets L2.

From SGLang's policy simulator, policy ``boundary_l1_l2`` (``benchmark/hicache/hicache_policy_simulator.py``,
PR #29049; rules restated in ``shared/reference/boundary_policy.md``), carried over to this tree's nodes
(runs of pages) and pools:

- on insert, the whole request path gets host copies at once, all or nothing (no hit-count threshold);
- L2 room is made one victim at a time: the least recently used *duplicate leaf* first (on device and
  host, no child with a host copy: only its host copy goes, it stays on device), else the least recently
  used host-only leaf (deleted). Nodes being reserved are skipped as victims;
- a device eviction demotes: a node already backed up first makes sure its device-only parent has a host
  copy, then leaves the device; a device-only node reserves host copies for itself (and for such a parent,
  first), all or nothing, and is deleted if that fails.

So a host-only node's parent is always the root or holds a host copy: what leaves L1 stays reachable in
L2, while the pages that are on both tiers drift towards the L1/L2 boundary. Each reservation that cannot
be met counts one failed host allocation (``CacheStats.host_alloc_failures``), as the simulator counts them.

One deliberate difference: a demotion's reservation never takes the host copy of the node's own parent
(the simulator protects only the nodes it reserves, so it may drop that copy as a duplicate leaf and leave
the demoted node host-only under a parent without one, which its own invariant check rejects).

Where the simulator cannot proceed (a backed-up node whose parent cannot get a host copy while the node
still has host-only descendants, an ``AssertionError`` there), this drops the node's subtree
(``hicache_dropped_tokens_total{reason="host_pressure"}``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from sim.cache.node import Node
from sim.cache.stats import HOST_PRESSURE

if TYPE_CHECKING:
    from sim.cache.radix import RadixTree
    from sim.cache.stats import CacheStats
    from sim.cache.tiers import BackupOp, Tier

__all__ = ["BoundaryCache", "BoundaryWriter"]


class BoundaryCache(Protocol):
    """What the policy reads and calls of its cache, :class:`sim.cache.hicache.HiCache` (which holds the writer,
    so the writer names only this)."""

    tree: RadixTree
    stats: CacheStats
    l1: Tier
    l2: Tier
    page_tokens: int
    write_back_copies: list[list[BackupOp]]

    def _start_backup(self, n: Node, pages: int, *, lock: bool) -> BackupOp: ...

    def _evict_host(self, node: Node) -> None: ...

    def _drop_subtree(self, node: Node, reason: str, top: bool = True) -> None: ...


class BoundaryWriter:
    """The boundary policy's decisions for one :class:`~sim.cache.hicache.HiCache` (which calls :meth:`touch` on
    insert and :meth:`evict_device` for each device victim)."""

    def __init__(self, cache: BoundaryCache) -> None:
        self.cache = cache
        self.tree = cache.tree
        self._dups: list[tuple[int, int, Node]] = []  # duplicate leaves by last access, lazily invalidated

    # ----- the policy's two entry points --------------------------------------------------------
    def touch(self, path: Sequence[Node]) -> None:
        """A request's path was inserted on device: give all of it host copies, or none."""
        if self.reserve(path, lock=True):
            self._file(path[-1])  # each other path node has a child with a host copy: the next one
        else:
            for node in path:
                self._file(node)

    def evict_device(self, node: Node) -> None:
        """Take ``node`` (an evictable device leaf) off the device, demoting it if L2 can hold it."""
        cache, root = self.cache, self.tree.root
        parent = node.parent
        bare_parent = parent is not root and parent.device and not parent.host
        if node.host:
            if not bare_parent or self.reserve([parent], keep=(node,)):
                self._demote(node)
            elif not node.children:
                self._drop_host(node)
                self._delete(node)
            else:
                cache._drop_subtree(node, HOST_PRESSURE)
                self._file(parent)
            return
        if self.reserve([parent, node] if bare_parent else [node], keep=(parent,)):
            self._demote(node)
        else:
            cache.stats.dropped_tokens[HOST_PRESSURE] += len(node.key) * cache.page_tokens
            self._delete(node)

    # ----- host reservations --------------------------------------------------------------------
    def reserve(self, nodes: Sequence[Node], *, lock: bool = False, keep: Sequence[Node] = ()) -> bool:
        """Host copies for every node of ``nodes`` that lacks one, all or nothing; ``nodes`` and ``keep``
        are not victims meanwhile. ``lock``: the write-through window (pending until acked)."""
        cache = self.cache
        missing = [n for n in nodes if not n.host]
        if not missing:
            return True
        pages = sum(len(n.key) for n in missing)
        l2 = cache.l2
        if pages <= l2.kv_cap:
            protected = None
            while l2.kv_used + pages > l2.kv_cap:
                if protected is None:
                    protected = {id(n) for n in nodes}
                    protected.update(id(n) for n in keep)
                if not self._evict_host_one(protected):
                    break
            else:
                copies = []
                for n in missing:
                    l2.alloc(len(n.key))
                    op = cache._start_backup(n, len(n.key), lock=lock)
                    if not lock:
                        copies.append(op)
                if copies:  # made inside a device eviction: copied before it goes on, as write_back's
                    cache.write_back_copies.append(copies)
                return True
        cache.stats.host_alloc_failures += 1
        cache.stats.backup_failed_tokens += pages * cache.page_tokens
        return False

    def alloc_host(self, pages: int) -> bool:
        """Room for ``pages`` host pages of a node that is not in the tree's tiers yet (an L3 prefetch),
        made with the boundary's victim order; allocates them."""
        l2 = self.cache.l2
        while not l2.alloc(pages):
            if not self._evict_host_one(set()):
                return False
        return True

    def _evict_host_one(self, protected: set[int]) -> bool:
        """Free one victim's host pages: the LRU duplicate leaf, else the LRU host-only leaf."""
        dup = self._pop_dup(protected)
        if dup is not None:
            self._drop_host(dup)
            self.cache.stats.dedup_evictions += 1
            return True
        victim = next(self.tree.host_victims(), None)
        if victim is None:
            return False
        parent = victim.parent
        self.cache._evict_host(victim)
        self._file(parent)
        return True

    # ----- duplicate leaves -----------------------------------------------------------------------
    def _file(self, node: Node) -> None:
        if node is not self.tree.root and _duplicate_leaf(node):
            heapq.heappush(self._dups, (node.last_access, node.id, node))
            if len(self._dups) > 4 * self.tree.num_nodes + 1024:
                self._dups = [e for e in self._dups if e[2].parent is not None and _duplicate_leaf(e[2])]
                heapq.heapify(self._dups)

    def _pop_dup(self, protected: set[int]) -> Node | None:
        """The least recently used duplicate leaf outside ``protected`` whose backup is not in flight.
        An entry older than its node's last access is filed again at that time (accesses are not
        reported here)."""
        heap, skipped, found = self._dups, [], None
        while heap:
            t, nid, node = heapq.heappop(heap)
            if node.parent is None or not _duplicate_leaf(node):
                continue
            if node.last_access != t:
                heapq.heappush(heap, (node.last_access, nid, node))
            elif id(node) in protected or node.pending is not None:
                skipped.append((t, nid, node))
            else:
                found = node
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    # ----- residency changes ----------------------------------------------------------------------
    def _demote(self, node: Node) -> None:
        cache = self.cache
        cache.l1.free(len(node.key))
        cache.stats.demotions += 1
        self.tree.demote(node)

    def _drop_host(self, node: Node) -> None:
        """Give up the host copy of a node that is on device."""
        cache = self.cache
        cache.stats.host_evictions += 1
        cache.stats.host_evicted_tokens += len(node.key) * cache.page_tokens
        cache.l2.free(len(node.key))
        self.tree.clear_host(node)
        self._file(node.parent)

    def _delete(self, node: Node) -> None:
        cache, parent = self.cache, node.parent
        cache.l1.free(len(node.key))
        self.tree.delete_leaf(node)
        self._file(parent)


def _duplicate_leaf(node: Node) -> bool:
    """On device and host, no child with a host copy."""
    return node.device and node.host and not any(child.host for child in node.children.values())
