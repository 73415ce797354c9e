"""DeepSeek V4's cache controller: write-through backups from commit to ack, write-back copies at eviction, and
load-back of host hits at admission (``mem_cache/unified_radix_cache.py:1003-1075, 1681-1937, 3530-3584``).

:class:`HostController` is a base of :class:`~sim.cache.v4.swacache.SWACache` and works on its state; the tree
calls back into it through the hooks ``SWACache`` sets (``backup``, ``evict_unbacked``, ``back_up_window``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from mypy_extensions import trait

from sim.cache.v4.node import Backup, UNode
from sim.cache.v4.pools import PagedPools

if TYPE_CHECKING:
    from sim.cache.v4.running import Running

__all__ = ["WRITE_THRESHOLD", "HostController"]

WRITE_THRESHOLD = {"write_through": 1, "write_through_selective": 2}  # unified_radix_cache.py:558-560


@trait
class HostController(PagedPools):
    """Backups, acks and load-backs over the tree's host tier, with the counters they keep; over the pools it
    frees room in."""

    # Set by SWACache.__init__.
    window: int
    dropped: Counter
    write_policy: str
    threshold: int | None
    load_back_threshold: int
    pending: dict[int, Backup]
    write_back_copies: list[list[Backup]]
    _new_backups: list[Backup]
    hold_loads: bool
    loads: list[tuple]

    def _backup_on_insert(self, node: UNode) -> None:
        """Write-through: back up a node whose hit count reached the threshold, unbacked ancestors first."""
        if self.threshold is None or node.hit_count < self.threshold:
            return
        chain = [node]
        x = node.parent
        while x is not self.tree.root:
            assert x is not None
            if x.host:
                break
            chain.append(x)
            x = x.parent
        for n in reversed(chain):
            if not self.back_up(n, lock=True):
                return

    def back_up_window(self, node: UNode) -> None:
        """write_back: the SWA walk reached a window with no host copy. SGLang first reserves SWA host room for the
        whole unbacked window, evicting SWA host state if short (``unified_radix_cache.py:899-907``,
        ``unified_cache/components/swa.py:797-813``), then backs the node up as a leaf (KV first, :meth:`back_up`).
        A host leaf that reserve frees goes whole, so it can leave the KV pool no longer short."""
        swa = sum(x.tokens for x in self.tree.swa.unbacked_window(node))
        if swa > self.host_swa_free():
            self.tree.evict_host_swa(swa)
        self.back_up(node, lock=False)

    def back_up(self, node: UNode, *, lock: bool) -> bool:
        """Allocate host copies of ``node``'s Full KV and its unbacked window state, evicting host leaves if
        short, and commit them at once (``unified_radix_cache.py:1681-1760``); False if the host is full."""
        swa_nodes = self.tree.swa.unbacked_window(node)
        full = 0 if node.host else node.tokens
        swa = 0
        for x in swa_nodes:
            swa += x.tokens
        if not full and not swa:
            return True
        # The KV host pool first, asking host eviction for its shortfall (unified_radix_cache.py:1737-1762); then
        # the SWA host pool, reclaiming the whole request once if short (pool_host/group.py:176-245).
        failed: dict[str, int] | None = None
        if full > self.host_full_free():
            self.stats["host_evicted_tokens"] += self.tree.evict_host(int(full - self.host_full_free()))
            if full > self.host_full_free():
                failed = {}
        if failed is None and swa > self.host_swa_free():
            self.tree.evict_host_swa(swa)
            if swa > self.host_swa_free():
                failed = {"swa": swa}
        if failed is not None:
            self.stats["backup_failed_tokens"] += full
            if self.tree.events is not None:
                self.tree.events.append({"backup": self.tree.ref(node), "tokens": full, **failed, "failed": True})
            return False
        events = self.tree.events
        if events is not None:
            events.append({"backup": self.tree.ref(node), "tokens": full, **({"swa": swa} if swa else {})})
        self.tree.set_host(node, swa_nodes)
        op = Backup(node, [node, *swa_nodes], full, swa, self.page)
        if lock:  # the write-through window: pending and device-locked until the ack
            op.lock_uuid, op.locked = self.tree.lock(node), True
            for x in op.nodes:
                x.pending = op
            self.pending[id(op)] = op
            self._new_backups.append(op)
        else:
            self._count_backup(op)
            if events is not None:
                events.append({"ack": self.tree.ref(node), "wait": True})
            # the ack settles every node the copy covered, ancestors first (mark_write_through_pending sorts
            # them by depth; finish_write_through, unified_tree_core.py:2752-2767, 2840-2848)
            for x in (*reversed(swa_nodes), node):
                self.tree.settle(x)
            self.write_back_copies.append([op])
        return True

    def take_new_backups(self) -> list[Backup]:
        """Write-through backups started since the last call (for a caller that times their copies)."""
        ops, self._new_backups = self._new_backups, []
        return ops

    def _count_backup(self, op: Backup) -> None:
        self.stats["backup_full_tokens"] += op.full
        self.stats["backup_swa_tokens"] += op.swa

    def ack(self, op: Backup) -> None:
        """The copy of ``op`` landed: clear the pending marks and release the window's lock."""
        del self.pending[id(op)]
        events = self.tree.events
        if events is not None:
            refs = [self.tree.ref(x) for x in op.nodes if x.parent is not None and x.pending is op]
            if refs:
                last = max(refs, key=lambda r: r[1])
                events.append({"ack": [min(r[0] for r in refs), last[1], last[2]]})
        for x in op.nodes:
            if x.pending is op:
                x.pending = None
        tree = self.tree
        if op.locked and op.node.parent is not None:
            tree.unlock(op.node, op.lock_uuid)
        settle = tree.duplicates is not None  # settle() tracks duplicates under write_back only
        for x in op.nodes:
            if x.parent is not None:
                tree.update_leaf(x)
                if settle:
                    tree.settle(x)
        self._count_backup(op)

    def ack_all(self) -> list[Backup]:
        """Acknowledge every copy in flight at once, for a caller with no clock (a replay): none of them is left for
        :meth:`take_new_backups` (a replay never takes them, and kept they held every backed-up node alive)."""
        ops = list(self.pending.values())
        for op in ops:
            self.ack(op)
        self._new_backups.clear()
        return ops

    def _evict_unbacked(self, node: UNode, tracker: list[int]) -> None:
        """An unbacked device victim: write-back copies it first (dropping it if the host is full);
        write-through deletes it and counts the loss (``unified_radix_cache.py:1003-1075``)."""
        if self.write_policy == "write_back":
            if self.back_up(node, lock=False):
                self.stats["demoted_tokens"] += node.tokens
                self.tree.demote(node, tracker)
                return
            reason = "host_pressure"
        else:
            reason = "write_through_unbacked_eviction"
        self.dropped[reason] += node.tokens
        if self.tree.events is not None:
            if reason == "write_through_unbacked_eviction" and self.write_policy != "write_through":
                pass  # write_through_selective records nothing (unified_radix_cache.py:1060-1065)
            else:
                self.tree.events.append({"drop": reason, "tokens": node.tokens})
            self.tree.events.append({"delete": self.tree.ref(node)})
        self.tree.delete_leaf(node, tracker)

    def _load_back(self, r: Running) -> None:
        """Bring a host hit back to the device at admission when it reaches ``load_back_threshold`` or brings
        window state (``unified_radix_cache.py:1820-1937``); the request's prefix is then the best match."""
        tree, m = self.tree, r.match
        best = m.best
        if best is m.node and not m.swa_host:
            return
        path = list(tree.path_up(best))
        full_nodes = [x for x in path if not x.full]
        swa_nodes = []
        n = 0
        for x in path:
            if n >= self.window:
                break
            if not x.swa and x.host_swa:
                swa_nodes.append(x)
            n += x.tokens
        if any(x.loading is not None and x.loading is not best for x in (*full_nodes, *swa_nodes)):
            # write_back: a node another load-back in flight pins (its Full KV loaded, its window not) is not
            # claimed: SGLang builds an empty transfer and the request recomputes (build_load_back_spec,
            # unified_tree_core.py:2597-2610; unified_radix_cache.py:1879-1884)
            return
        kv = sum(x.tokens for x in full_nodes)
        swa = sum(x.tokens for x in swa_nodes)
        if kv < max(1, self.load_back_threshold) and not swa_nodes:
            self.stats["load_back_skipped_tokens"] += kv
            return
        tree.host_lock_path(best)
        uuid = tree.lock(best)
        if kv > self.full_free() or swa > self.swa_free():
            self._make_free(r, 0, full=kv, swa=swa)
        ok = kv <= self.full_free() and swa <= self.swa_free()
        if ok:
            pin = best if self.hold_loads and tree.duplicates is not None else None
            for x in reversed(full_nodes):  # write_back pins what it loads until the ack (:2703-2715)
                x.loading = pin
                tree.load(x)
            for x in swa_nodes:
                tree.swa.publish(x)
            if tree.events is not None:
                tree.events.append({"load": tree.ref(best), "tokens": kv, **({"swa": swa} if swa else {})})
        if not ok:
            tree.unlock(best, uuid)
            tree.host_unlock_path(best)
            return
        if self.hold_loads:  # locked on both tiers until the load's ack (load_done); the request locks anew
            self.loads.append((best, uuid, kv))
            tree.unlock(r.lock_node, r.lock_uuid)
            uuid = tree.lock(best)
        else:  # the load's lock becomes the request's: the same counts and id as an unlock and a lock again
            tree.host_unlock_path(best)
            tree.unlock(r.lock_node, r.lock_uuid)
        r.lock_node, r.lock_uuid = best, uuid
        r.host_hit = m.best_len - m.device
        r.protected = r.prefilled = r.allocated = m.best_len
        r.load_full, r.load_swa = kv, swa
        self.stats["load_full_tokens"] += kv
        self.stats["load_swa_tokens"] += swa

    def load_done(self, load: tuple) -> None:
        """A load-back's ack: its node unlocks on both tiers (``unified_radix_cache.py:3530-3584``); the nodes it
        pinned, and only those, are settled (``finish_load_back``, ``unified_tree_core.py:2735-2751``)."""
        node, uuid, _ = load
        tree = self.tree
        if tree.events is not None:
            tree.events.append({"load_done": tree.ref(node)})
        tree.unlock(node, uuid)
        tree.host_unlock_path(node)
        for x in tree.path_up(node):
            if x.loading is node:
                x.loading = None
                tree.settle(x)
