"""The HiCache controller's transfers, SGLang's ``managers/cache_controller.py`` seam: device-to-host backups
(write-through chains, write_back victim copies), the write-through window and its acks, load-backs and
their acks, and the host side of L3 reads (reservation, placement).

:class:`CacheController` is a base of :class:`sim.cache.hicache.HiCache` and works on its state (the tree,
the tiers, the counters, the host-tier event log), as SGLang's controller works on the cache's pools; a
base rather than a member because a backup or an ack is made per node on a replay's hot path.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sim.cache.ages import landed
from sim.cache.node import Node
from sim.cache.radix import InsertResult, RadixTree, node_ref
from sim.cache.tiers import BackupOp, Tier, no_window_pool

if TYPE_CHECKING:
    from sim.cache.boundary import BoundaryWriter
    from sim.cache.lookup import Lookup
    from sim.cache.stats import CacheStats

__all__ = ["CacheController"]


class CacheController:
    """Backups, acks, load-backs and L3 placements over a :class:`~sim.cache.hicache.HiCache`'s state."""

    # Set by HiCache.__init__.
    tree: RadixTree
    stats: CacheStats
    l1: Tier
    l2: Tier
    page_tokens: int
    threshold: int | None
    l2_enabled: bool
    all_pages_mask: int
    pending: dict[int, BackupOp]
    write_back_copies: list[list[BackupOp]]
    events: list[dict] | None
    _op_ids: itertools.count
    _duplicates: dict[int, Node] | None
    _boundary: BoundaryWriter | None

    def _ref(self, node: Node) -> list[int]:
        return node_ref(node, self.page_tokens)

    # ----- backups and their acks -------------------------------------------------------------
    def _backup_node(self, node: Node) -> bool:
        """write_back: back up one device victim and wait for its copy; False if the host is full.

        The copy's ack registers the victim as a duplicate before it is demoted (``finish_write_through``,
        ``unified_tree_core.py:2840-2848``, via ``unified_radix_cache.py:1033-1040, 3480-3488``); the demotion
        leaves the entry stale where it stands, so a later un-eviction keeps that place in the order."""
        pages = len(node.key)
        if not self._alloc_host(pages):
            self._backup_failed(node, pages)
            return False
        op = self._start_backup(node, pages, lock=False)
        if self._duplicates is not None:
            self._duplicates.setdefault(node.id, node)
        if self.events is not None:
            self.events.append({"ack": self._ref(node), "wait": True})
        self.write_back_copies.append([op])
        return True

    def _backup_failed(self, node: Node, pages: int) -> None:
        self.stats.backup_failed_tokens += pages * self.page_tokens
        self.stats.host_alloc_failures += 1
        if self.events is not None:
            self.events.append({"backup": self._ref(node), "tokens": pages * self.page_tokens, "failed": True})

    def _backup_chain(self, node: Node) -> None:
        """Write-through: back up ``node`` and its unbacked ancestors, parent first, stopping at the first the
        host has no room for (``unified_tree_core.py:2622-2644``, ``unified_radix_cache.py:1687-1720``)."""
        chain = []
        while node is not self.tree.root and not node.host:
            chain.append(node)
            node = node.parent
        for n in reversed(chain):
            pages = len(n.key)
            if not self._alloc_host(pages):
                self._backup_failed(n, pages)
                return
            self._start_backup(n, pages, lock=True)

    def _start_backup(self, n: Node, pages: int, *, lock: bool) -> BackupOp:
        """Commit a host copy of ``n`` in pages already allocated, and its D2H copy."""
        self.tree.set_host(n, self.all_pages_mask)
        op = BackupOp(next(self._op_ids), n if lock else None, [n], pages)
        if self.events is not None:
            self.events.append({"backup": self._ref(n), "tokens": pages * self.page_tokens})
        if lock:  # the write-through window: pending and device-locked until the copy is acked
            n.pending = op
            self.tree.lock(n)
            self.pending[op.id] = op
        else:
            self._record_backup(op)
        return op

    def _record_backup(self, op: BackupOp) -> None:
        self.stats.backup_kv_pages += op.kv_pages

    def ack(self, op: BackupOp) -> None:
        """The D2H copy of ``op`` completed: clear the pending mark and release the window's lock."""
        del self.pending[op.id]
        for n in op.nodes:
            n.pending = None
            if n.device and self._duplicates is not None:
                self._duplicates.setdefault(n.id, n)
        if op.locked is not None:
            if self.events is not None:  # the span of every node the copy covered (split halves included)
                refs = [self._ref(n) for n in op.nodes if n.parent is not None]
                last = max(refs, key=lambda r: r[1])
                self.events.append({"ack": [min(r[0] for r in refs), last[1], last[2]]})
            self.tree.unlock(op.locked)
        for n in op.nodes:
            self.tree.refile(n)
        self._record_backup(op)

    def ack_all(self) -> list[BackupOp]:
        ops = list(self.pending.values())
        for op in ops:
            self.ack(op)
        return ops

    # ----- the host side of L3 reads ----------------------------------------------------------
    def reserve_host(self, kv_pages: int, swa_pages: int, min_kv_pages: int) -> int:
        """Take host pages for an L3 read before it starts, as SGLang allocates a prefetch's host pages when
        its lookup hits, evicting host LRU leaves (``hybrid_cache_controller.py:796-829``): all of them,
        else as many as are free if that is at least ``min_kv_pages`` (a partial read), else none. Returns
        the pages taken; the caller gives them back (:meth:`Tier.free`) before :meth:`insert_host` places
        what landed. There is no window state to reserve room for (``swa_pages`` must be 0)."""
        if swa_pages:
            no_window_pool("reserve_host", swa_pages)
        if self._alloc_host(kv_pages):
            return kv_pages
        part = min(kv_pages, int(self.l2.kv_cap - self.l2.kv_used))
        return part if part >= max(1, min_kv_pages) and self.l2.alloc(part) else 0

    def insert_host(self, keys: Sequence, n_pages: int, window: bool) -> int:
        """Put pages prefetched from storage into L2 as host-only nodes; returns pages added.

        Stops early if the host is full even after host eviction (the tail is then not inserted). A read
        brings no window state here (``window`` must be False).
        """
        if window:
            no_window_pool("insert_host", n_pages)
        res = self.tree.insert(keys[:n_pages], device=False)
        if not res.inserted_pages:
            return 0
        new = res.path[len(res.path) - self._new_nodes(res) :]
        leaf = new[-1]
        self.tree.host_lock(leaf)  # not evicted while making room for itself
        ok = self._alloc_host(res.inserted_pages)
        self.tree.host_unlock(leaf)
        if not ok:
            for node in reversed(new):
                self.tree.delete_leaf(node)
            return 0
        for node in new:
            self.tree.set_host(node, self.all_pages_mask)
            self.tree.refile(node)
            if self.tree.ages is not None:
                node.used = landed(self.tree.ages.clock.now)
        return res.inserted_pages

    # ----- load-back ------------------------------------------------------------------------
    def load_back(self, lk: Lookup) -> int:
        """Start loading ``lk``'s host hit back to the device, as SGLang's ``init_load_back`` does at admission
        (``unified_radix_cache.py:1857-1920``): nothing below ``load_back_threshold`` tokens; device room made by
        evicting device leaves, or nothing if that fails; the loaded nodes join the device tree at once and stay
        locked until :meth:`load_done`. Returns the pages loaded."""
        if not lk.host_pages or not lk.load:
            if lk.host_pages:
                self.stats.load_back_skipped_tokens += lk.host_pages * self.page_tokens
            return 0
        revive = []
        node = lk.best_node
        while node is not self.tree.root and not node.device:
            revive.append(node)
            node = node.parent
        pages = sum(len(n.key) for n in revive)
        self.tree.lock(lk.device_node)
        ok = self.ensure_device(pages)
        self.tree.unlock(lk.device_node)
        if not ok:
            return 0
        for n in reversed(revive):
            self.tree.revive(n)
            self.l1.alloc(len(n.key))
            n.dev_mask = self.all_pages_mask
            n.loading = lk.best_node
        self.tree.lock(lk.best_node)
        self.tree.host_lock(lk.best_node)
        self.stats.load_kv_pages += pages
        if self.events is not None:
            self.events.append({"load": self._ref(lk.best_node), "tokens": pages * self.page_tokens})
        return pages

    def load_done(self, node: Node) -> None:
        """A load-back's ack: the nodes unlock on both tiers; the ones it loaded (pinned to ``node``, its anchor;
        another load-back's pins on the path stay) keep their host copies as duplicates, anchor first
        (``unified_radix_cache.py:3530-3584``; ``finish_load_back``, ``unified_tree_core.py:2735-2751``)."""
        if self.events is not None:
            self.events.append({"load_done": self._ref(node)})
        self.tree.unlock(node)
        x = node
        while x is not self.tree.root:
            if x.loading is node:
                x.loading = None
                if self._duplicates is not None:
                    self._duplicates.setdefault(x.id, x)
            x = x.parent
        self.tree.host_unlock(node)

    # ----- inserts --------------------------------------------------------------------------
    def _back_up_hits(self, path: list[Node], inserted_pages: int) -> None:
        """Back up the nodes whose hit count this insert raised to the threshold: only those ending past what
        the request inserted before (``unified_tree_core.py:1368-1374, 1431-1439``), each with its unbacked
        ancestors, after the walk."""
        threshold = self.threshold
        if not self.l2_enabled or threshold is None:
            return
        end = 0
        for node in path:
            end += len(node.key)
            if end > inserted_pages and not node.host and node.hit_count >= threshold:
                self._backup_chain(node)

    def _new_nodes(self, res: InsertResult) -> int:
        """How many nodes at the end of ``res.path`` the insert created (one, or one per page)."""
        return res.inserted_pages if self.tree.one_page_nodes else 1
