"""L3 prefetch: a storage read issued as a request is queued, polled at admission, landed in L2 (SGLang's
``_prefetch_kvcache``, ``managers/scheduler.py:3342``; the cache controller's prefetch thread,
``managers/cache_controller.py:1078``; the retries of ``mem_cache/storage_prefetch.py:22``).

An L3 lookup is issued when a request is queued; lookups run one at a time, as on SGLang's prefetch thread, and
a read starts when its lookup ends. Admission passes over a request whose lookup or read still runs, until the
prefetch policy lets it go (DESIGN.md 1.5); a lookup that missed holds it too, except under ``best_effort``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sim.cache.node import Node
from sim.serve.scheduler.l3read import Prefetch

if TYPE_CHECKING:
    from sim.serve.scheduler.cache_controller import Link
    from sim.serve.scheduler.instance_state import InstanceState
    from sim.serve.scheduler.req import Running

# A queued request whose L3 lookup missed is looked up again every 8 scheduling passes, at most 8 times
# (--hicache-storage-prefetch-retry-poll-interval / -max-attempts, arg_groups/fields/memory.py:181-205).
PREFETCH_RETRY_INTERVAL = 8
PREFETCH_RETRY_MAX_ATTEMPTS = 8


class Prefetcher:
    """One instance's L3 reads: the requested tokens in flight, capped at half the host pool; the queued
    requests whose lookup is re-issued at a later pass; this pass's requests skipped while their read runs
    (``blocked``), and the earliest deadline among them (``wake``)."""

    def __init__(self, inst: InstanceState, links: dict[str, Link]) -> None:
        self.inst, self.sim, self.env, self.links = inst, inst.sim, inst.env, links
        self.tokens = 0
        self.cap = 0.5 * inst.sim.cfg.l2_pages * inst.sim.cfg.page_tokens
        self.retries: dict[int, int | None] = {}  # rid -> pass at which the lookup is re-issued (None: no pass yet)
        self._missed: list[Running] = []  # requests whose lookup missed since the last pass
        self._due: dict[int, list[Running]] = {}  # pass -> the requests whose lookup it re-issues
        self.passes = 0
        self.blocked = 0
        self.wake = math.inf

    def start(self, run: Running) -> None:
        """Issue an L3 read for a request as it is queued (SGLang ``_add_request_to_queue`` ->
        ``_prefetch_kvcache``, ``scheduler.py:3342-3391, 3474-3492``; ``prefetch_from_storage``,
        ``unified_radix_cache.py:2081-2257``).

        The span after the request's L1 + L2 match is asked for only if the match ends on a backed-up node
        (an unbacked one is a certain miss, ``scheduler.py:3364-3370``) and is at least the threshold
        (no lookup, no retry otherwise). A storage hit below the threshold, or a read refused because the
        reads in flight already ask for half the host pool (``cache_controller.py:628-638, 1269-1286``),
        is looked up again later (:meth:`retry_due`; ``unified_radix_cache.py:2154-2158,
        3162-3181``). The read's pages land in L2 when it ends or is cut short at admission.
        """
        cfg, cache = self.sim.cfg, self.inst.cache
        req, pt, counters = run.req, cfg.page_tokens, self.sim.rec.counters
        if run.prefetch is not None:
            return
        self.retries.pop(req.rid, None)
        lk = cache.lookup(req.keys, req.input_len)
        anchor, start = lk.best_node, lk.device_pages + lk.host_pages
        cache.abandon(lk)
        stop = max(0, (req.input_len - 1) // pt)
        requested = (stop - start) * pt
        threshold = max(cfg.prefetch_threshold, pt)  # cache_controller.py:623
        if not anchor.host or requested < threshold:  # the root counts as backed up
            return
        if self.tokens >= self.cap:
            counters["sim_prefetch_rate_limited_total"] += 1
            self._retry_later(run)
            return
        hit = self.sim.storage.hit_pages(req.keys, start, stop)
        counters["storage_prefetch_hit_tokens_total"] += hit * pt
        # The lookup asks batch by batch and stops at the first batch with a miss (cache_controller.py:1308-1330).
        batch = cfg.l3_io_batch_pages
        calls = min(-(-(stop - start) // batch), hit // batch + 1)
        _, looked_up = self.links["l3_lookup"].submit(self.env.now, cfg.l3_latency_s * calls)
        if hit * pt < threshold:
            counters["storage_prefetch_unfulfilled_tokens_total:below_threshold"] += hit * pt
            self._retry_later(run)
            run.lookup_done_s, run.lookup_deadline = looked_up, None
            return
        self._read(run, anchor, start, hit, requested, -(-threshold // pt), looked_up)

    def _read(self, run: Running, anchor: Node, start: int, hit: int, requested: int, min_pages: int,
              looked_up: float) -> None:  # fmt: skip
        """The read of a lookup that hit: host room reserved (at least ``min_pages``), then on the read link."""
        cfg, cache, pt, counters = self.sim.cfg, self.inst.cache, self.sim.cfg.page_tokens, self.sim.rec.counters
        cache.tree.host_lock(anchor)  # not evicted to make room for its own read
        window_pages = cache.window.pages if cache.window else 0
        pages = cache.reserve_host(hit, window_pages, min_pages)
        if pages < hit:  # SGLang: host_capacity (unified_radix_cache.py:3111-3140)
            counters["storage_prefetch_unfulfilled_tokens_total:host_capacity"] += (hit - pages) * pt
        if not pages:
            cache.tree.host_unlock(anchor)
            self._retry_later(run)
            return
        window = pages if cfg.l3_all_window_pages else window_pages  # EIC reads whole pages per pool
        swa = window if pages == hit and window_pages else 0
        self.sim.storage.touch(run.req.keys[start : start + pages])  # read: most recently used
        nbytes = sum(cache.pool_bytes(pages, swa).values())
        seconds = nbytes / cfg.l3_read_Bps + cfg.l3_latency_s * math.ceil(pages / cfg.l3_io_batch_pages)
        t_start, t_end = self.links["l3_read"].submit(looked_up, seconds)
        self.tokens += requested
        pf = run.prefetch = Prefetch(start, pages, swa, requested, anchor, t_start, t_end, nbytes)
        counters["sim_prefetches_total"] += 1
        counters["sim_prefetch_requested_tokens_total"] += requested

        def landed(_event) -> None:
            if run.prefetch is pf:  # not cut short at admission
                self.end(run, pf.pages)
                self.inst.notify()

        self.env.timeout(t_end - self.env.now).callbacks.append(landed)

    def lookup_released(self, run: Running) -> bool:
        """Whether a request whose L3 lookup missed may be admitted now. SGLang holds it like a read until the
        scheduler drains the lookup's result (``check_prefetch_progress``, ``unified_radix_cache.py:2391-2420``;
        the miss is revoked in the drain, ``:3153-3208``): not at all under ``best_effort``, until the lookup
        ends under ``wait_complete``, and at most the base timeout from the first poll under ``timeout``."""
        cfg, now = self.sim.cfg, self.env.now
        if run.lookup_done_s <= now or cfg.prefetch_policy == "best_effort":
            return True
        wake = run.lookup_done_s
        if cfg.prefetch_policy == "timeout":
            if run.lookup_deadline is None:
                run.lookup_deadline = now + cfg.prefetch_timeout_base_s
            if now >= run.lookup_deadline:
                return True
            wake = min(wake, run.lookup_deadline)
        self.wake = min(self.wake, wake)
        return False

    def poll(self, run: Running) -> bool:
        """Whether a request whose L3 read runs may be admitted now; ends the read if so (SGLang
        ``check_prefetch_progress``, ``unified_radix_cache.py:2391-2420, 2295-2313``).

        ``best_effort`` cuts the read at the first poll; ``wait_complete`` waits for all of it;
        ``timeout`` allows base + per-1,024-token x the *requested* tokens, counted from the first poll
        that found the read unfinished (:2259-2283), then keeps what has landed.
        """
        pf, cfg, now = run.prefetch, self.sim.cfg, self.env.now
        if cfg.prefetch_policy == "wait_complete":
            return False  # the landing admits it
        if cfg.prefetch_policy == "timeout":
            if pf.deadline is None:
                pf.deadline = now + cfg.prefetch_timeout_base_s + (
                    cfg.prefetch_timeout_per_ki_token_s * pf.requested_tokens / 1024)  # fmt: skip
            if now < pf.deadline:
                self.wake = min(self.wake, pf.deadline)
                return False
        span = pf.t_end - pf.t_start
        done = int(pf.pages * min(1.0, max(0.0, now - pf.t_start) / span)) if span > 0 else pf.pages
        link = self.links["l3_read"]
        if done < pf.pages and link.free_at == pf.t_end:  # nothing queued behind: the rest is cancelled
            link.free_at = pf.t_end = max(now, pf.t_start)
        self.end(run, done)
        return True

    def end(self, run: Running, done: int) -> None:
        """Put the ``done`` pages the read brought into L2 and release what it held (SGLang
        ``_handle_prefetch_result``, ``unified_radix_cache.py:2422-2534``)."""
        pf, sim, pt, cache = run.prefetch, self.sim, self.sim.cfg.page_tokens, self.inst.cache
        run.prefetch = None
        self.tokens -= pf.requested_tokens
        cache.tree.host_unlock(pf.anchor)
        cache.l2.free(pf.pages, pf.swa_pages)  # the reservation: insert_host takes what it keeps
        if pf.t_end > pf.t_start:
            sim.rec.transfer(self.inst.idx, "l3_read", pf.t_start, pf.t_end, pf.nbytes * done // pf.pages)
        window = done == pf.pages and pf.swa_pages > 0
        pages = cache.insert_host(run.req.keys, pf.start + done, window=window) if done else 0
        run.prefetched_pages = min(done, pages)
        sim.rec.counters["prefetched_tokens_total"] += done * pt
        if done < pf.pages:  # cut short: by the timeout's deadline, or at once under best_effort
            reason = "deadline" if sim.cfg.prefetch_policy == "timeout" else "storage_transfer"
            sim.rec.counters[f"storage_prefetch_unfulfilled_tokens_total:{reason}"] += (pf.pages - done) * pt

    def _retry_later(self, run: Running) -> None:
        """The lookup missed: it is re-issued at a later pass (:meth:`retry_due`)."""
        self.retries[run.req.rid] = None
        self._missed.append(run)

    def retry_due(self) -> None:
        """Once per scheduling pass, re-issue the L3 lookups that are due (SGLang
        ``StoragePrefetchRetries.pop_ready``, ``mem_cache/storage_prefetch.py:43-83``, called from
        ``scheduler.py:3393-3404, 3879-3891``): a lookup that missed is due 8 passes after the first pass
        that sees it, at most 8 re-issues per request, and never for the queue head, which is admitted
        with what it has. The due lookups are re-issued in queue order.

        A pass files the misses since the last one under the pass they are due at and takes the requests filed
        under its own, so its cost does not grow with the queue (scanning the queue at every pass made an
        overloaded run with L3 quadratic). An entry whose request was admitted, dropped or became the head has
        left ``retries`` and is passed over."""
        self.passes += 1
        step, retries, waiting, missed = self.passes, self.retries, self.inst.waiting, self._missed
        due_now = self._due.pop(step, ())
        if not (waiting and retries):
            missed.clear()
            return
        retries.pop(waiting[0].req.rid, None)
        if missed:
            filed = self._due.setdefault(step + PREFETCH_RETRY_INTERVAL, [])
            for run in missed:
                rid = run.req.rid
                if rid in retries and retries[rid] is None:
                    retries[rid] = step + PREFETCH_RETRY_INTERVAL
                    filed.append(run)
            missed.clear()
        ready = []
        for run in due_now:
            rid = run.req.rid
            if retries.get(rid) != step:
                continue
            del retries[rid]
            if run.prefetch_attempts < PREFETCH_RETRY_MAX_ATTEMPTS:
                ready.append(run)
        ready.sort(key=lambda run: run.queue_seq)
        for run in ready:
            run.prefetch_attempts += 1
            self.sim.rec.counters["sim_prefetch_retries_total"] += 1
            self.start(run)
