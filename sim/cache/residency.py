"""Residency bookkeeping of the radix tree: who holds and locks each node, and the leaf orders eviction pops.

This is the FULL component's share of SGLang's tree core (``unified_cache/components/full.py``: component locks
:282-380, host locks :290-301; the evictable/protected sizes and leaf sets of ``unified_tree_core.py``):
:class:`TreeResidency` is the base of :class:`sim.cache.radix.RadixTree`, which adds the structure (match,
insert, split). It is a base class, not a member, because lock, unlock and refile run on every node a lookup
or an insert walks: a member would add an attribute hop to each of those calls.

Invariants kept here:
- device residency is prefix-closed (a device node's ancestors are on device), because only device
  leaves are demoted or deleted;
- ``evictable_tokens + protected_tokens`` is the number of device-resident tokens;
- a node is in the device LRU iff it is on device, unlocked, and has no device child; in the host LRU
  iff it is host-only, host-unlocked, and childless.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.cache.eviction import PriorityOrder
    from sim.cache.node import Node

__all__ = ["TreeResidency"]


class TreeResidency:
    """Lock refs, tier residency and the two LRU orders of a tree's nodes; the tree (its subclass) calls the
    transitions as its structure changes, the HiCache controller as it moves KV between tiers.

    *page_size*: tokens per page key (the token counters count tokens).
    """

    root: Node
    num_nodes: int

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.evictable_tokens = 0
        self.protected_tokens = 0
        self.host_tokens = 0
        self._dev_heap: list[tuple[int, int, Node]] = []
        self._host_heap: list[tuple[int, int, Node]] = []
        self._dev_order: PriorityOrder | None = None  # None: LRU on the heap above

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

    def device_tokens(self) -> int:
        return self.evictable_tokens + self.protected_tokens


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
