"""The copies between the tiers and their acks: SGLang's ``HiCacheController`` (``managers/cache_controller.py:295``,
``write`` :864, ``load`` :928, ``write_storage`` :1386) on FIFO links.

Timeline of a write-through backup (DESIGN.md 1.4): *t1* the request's prefill ends and its pages are inserted
and committed as backed up (pending, device-locked); *t2* the end of that scheduler step flushes every queued
backup as one merged D2H op (:meth:`CacheController.flush`); *t3* the copy completes and the ack is processed at
the next scheduler step (:meth:`CacheController.process_acks`), releasing the lock (and, with L3 on, queueing
TP0's write to storage).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.serve.scheduler.instance_state import InstanceState
    from sim.serve.scheduler.req import Running

# l3_lookup: SGLang's prefetch thread, which runs one storage lookup at a time (cache_controller.py:1333-1366)
LINKS = ("h2d", "d2h", "l3_read", "l3_write", "l3_lookup")


@dataclass
class Link:
    """A FIFO copy stream: transfers run one after another; ``free_at`` is when the last one ends."""

    name: str
    free_at: float = 0.0
    intervals: list = field(default_factory=list)

    def submit(self, now: float, seconds: float) -> tuple[float, float]:
        start = max(now, self.free_at)
        self.free_at = start + seconds
        return start, self.free_at


def storage_pages(op: Any, windowed: bool) -> tuple[list, bool, int]:
    """What a backup writes to storage: its page keys, whether it carries window state, its window pages
    (``windowed``: the cache has a window pool)."""
    keys = [k for n in op.storage_nodes for k in n.key]
    return (keys, any(n.host_swa for n in op.nodes), op.swa_pages) if windowed else (keys, False, 0)


class CacheController:
    """One instance's copy links, the backups queued in this step (``to_flush``) and the acks not yet processed
    (``acked``)."""

    def __init__(self, inst: InstanceState) -> None:
        self.inst, self.sim, self.env = inst, inst.sim, inst.env
        self.links = {name: Link(name) for name in LINKS}
        self.to_flush: list[Any] = []  # the caches' backups (PrefixCache.commit)
        self.acked: list[Any] = []
        self.sync_until = 0.0  # a write_back eviction's D2H copy holds the next batch until then

    def process_acks(self) -> None:
        """t3: the acks that landed since the last step release their locks (SGLang ``writing_check``,
        ``mem_cache/unified_radix_cache.py:3472``)."""
        if not self.acked:
            return
        ops, self.acked = self.acked, []
        cache, storage = self.inst.cache, self.sim.storage
        for op in ops:
            cache.ack(op)
            if storage is not None:  # after the ack, TP0 writes the pages to storage
                self.write_pages(*storage_pages(op, cache.window is not None))

    def flush(self) -> None:
        """End of a scheduler step: one merged D2H op for every backup queued during it (t2)."""
        if not self.to_flush:
            return
        ops, self.to_flush = self.to_flush, []
        sim, cache = self.sim, self.inst.cache
        kv = swa = 0
        for op in ops:
            kv += op.kv_pages
        if cache.window:
            for op in ops:
                swa += op.swa_pages
        seconds = sim.transfer_seconds("d2h", kv, swa, cache)
        start, end = self.links["d2h"].submit(self.env.now, seconds)
        sim.rec.transfer(self.inst.idx, "d2h", start, end, sum(cache.pool_bytes(kv, swa).values()))
        sim.rec.counters["backup_flushes"] += 1

        def acked(_event: object, ops: list[Any] = ops) -> None:
            self.acked.extend(ops)
            self.inst.notify()

        self.env.timeout(end - self.env.now).callbacks.append(acked)

    def load_back(self, run: Running) -> None:
        """Queue an admitted request's host hit, if any, on the H2D link; the prefill that carries it overlaps
        the copy layer by layer (``Instance``'s pass end)."""
        adm, sim, cache = run.adm, self.sim, self.inst.cache
        load_swa = adm.load_swa_pages if cache.window else 0
        if not (adm.load_kv_pages or load_swa):
            return
        seconds = sim.transfer_seconds("h2d", adm.load_kv_pages, load_swa, cache)
        start, end = self.links["h2d"].submit(self.env.now, seconds)
        sim.rec.transfer(self.inst.idx, "h2d", start, end,
                         sum(cache.pool_bytes(adm.load_kv_pages, load_swa).values()))  # fmt: skip
        run.load_done_s = end
        run.load_s += end - self.env.now  # every admission's load-back, a re-prefill's too

    def charge_write_back(self) -> None:
        """A write_back eviction waits for the D2H copy of what it evicts: SGLang submits the copy and
        synchronizes on it before the eviction goes on (``unified_radix_cache.py:1028-1036, 1647-1663,
        3478-3489``). Each copy goes on the D2H link now and the scheduler launches no batch before it
        lands; with L3 on, its pages go to storage after that ack, as any backup's do (:1803-1818)."""
        cache = self.inst.cache
        copies = cache.write_back_copies
        if not copies:
            return
        sim = self.sim
        for ops in copies:
            kv = sum(op.kv_pages for op in ops)
            swa = sum(op.swa_pages for op in ops) if cache.window else 0
            start, end = self.links["d2h"].submit(self.env.now, sim.transfer_seconds("d2h", kv, swa, cache))
            sim.rec.transfer(self.inst.idx, "d2h", start, end, sum(cache.pool_bytes(kv, swa).values()))
            self.sync_until = max(self.sync_until, end)
            if sim.storage is not None:  # the keys as they are now: the nodes may be split or evicted later
                writes = [storage_pages(op, cache.window is not None) for op in ops]
                self.env.timeout(end - self.env.now).callbacks.append(partial(self._write_all, writes))
        copies.clear()

    def _write_all(self, writes: list[tuple[list, bool, int]], _event: object) -> None:
        for w in writes:
            self.write_pages(*w)

    def write_pages(self, keys: list, window: bool, swa_pages: int) -> None:
        """Write pages to storage; they are readable, and counted in ``backuped_tokens_total``, once the
        write lands (SGLang counts at the storage write ack, ``unified_radix_cache.py:3240-3260``)."""
        if not keys:
            return
        sim, cfg = self.sim, self.sim.cfg
        swa = len(keys) if cfg.l3_all_window_pages and window else swa_pages
        nbytes = sum(self.inst.cache.pool_bytes(len(keys), swa).values())
        seconds = nbytes / cfg.l3_write_Bps + cfg.l3_latency_s * math.ceil(len(keys) / cfg.l3_io_batch_pages)
        start, end = self.links["l3_write"].submit(self.env.now, seconds)
        sim.rec.transfer(self.inst.idx, "l3_write", start, end, nbytes)

        storage = sim.storage
        assert storage is not None

        def written(_event: object) -> None:
            storage.put(keys, window)
            sim.rec.counters["backuped_tokens_total"] += len(keys) * cfg.page_tokens

        self.env.timeout(end - self.env.now).callbacks.append(written)
