"""Which waiting requests join the next prefill batch, and how much of each: SGLang's ``SchedulePolicy``
(queue order, ``managers/schedule_policy.py:190``) and ``PrefillAdder`` (the pass's token budgets and the
chunks, :607).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.cache.hicache import Admission
from sim.cache.protocol import PrefixCache
from sim.cache.radix import RadixTree
from sim.cache.v4.hicache import V4Admission
from sim.model.compute import attention_pairs
from sim.serve.scheduler.req import Running

if TYPE_CHECKING:
    from sim.serve.scheduler.cache_controller import CacheController
    from sim.serve.scheduler.instance_state import InstanceState
    from sim.serve.scheduler.prefetch import Prefetcher
    from sim.serve.scheduler.running_batch import RunningBatch

LPM_MAX_QUEUE = 128  # SGLang falls back from lpm to fcfs above this queue length (schedule_policy.py)
# In-batch prefix caching (schedule_policy.py:110-119): a waiting request with at most this many device-cached
# tokens whose prompt shares at least as many with an earlier such request is scheduled after the others.
IN_BATCH_PREFIX_TOKENS = 32


def lpm_order(cache: PrefixCache, waiting: deque[Running], page_tokens: int) -> deque[Running]:
    """The waiting queue in SGLang's lpm order (``schedule_policy.py:346-395, 441-450``): most device +
    host matched tokens first, as the match reports them after the window check and the
    ``input_len - 1`` cap (``mem_cache/common.py:244-261``); ties keep queue order. A request with
    (almost) nothing cached on device whose prompt shares a prefix with an earlier such request waiting
    goes last, so that one computes the shared prefix and the others then hit it. The waiting requests'
    prompts are compared page by page here (SGLang compares tokens). Like SGLang's, each match refreshes
    the path's LRU time."""
    pt = page_tokens
    waiting_tree = RadixTree(pt)
    keys: list[float] = []
    for run in waiting:
        lk = cache.lookup(run.req.keys, run.req.input_len)
        cache.abandon(lk)
        if lk.device_pages * pt <= IN_BATCH_PREFIX_TOKENS:
            if waiting_tree.match(run.req.keys).device_pages * pt >= IN_BATCH_PREFIX_TOKENS:
                keys.append(math.inf)
                continue
            waiting_tree.insert(run.req.keys)
        keys.append(-(lk.device_pages + lk.host_pages))
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return deque(waiting[i] for i in order)


class PrefillAdder:
    """Forms one instance's prefill batches: admits waiting requests within the pass's budgets (:meth:`admit`),
    then runs this pass's chunks of the admitted ones (:meth:`plan_prefill`)."""

    def __init__(self, inst: InstanceState, ctrl: CacheController, prefetcher: Prefetcher,
                 running_batch: RunningBatch, drop: Callable[[Running], None]) -> None:  # fmt: skip
        """The instance's parts it admits with; ``drop``: the instance's, for a request that never fits."""
        self.inst, self.cfg = inst, inst.sim.cfg
        self.ctrl, self.prefetcher, self.running_batch, self.drop = ctrl, prefetcher, running_batch, drop

    def admit(self) -> bool:
        """Admit waiting requests in queue order while L1, the token budget and the running cap allow;
        True if L1 stalled admission.

        A request whose L3 read still runs is skipped, not waited for (``scheduler.py:4240-4247``); the
        requests behind it may go first.

        Admission shares the pass's budgets with its chunks, as SGLang's PrefillAdder does: the chunked
        request's next chunk is charged first (``add_chunked_req``, ``schedule_policy.py:1215-1226``), each
        admitted request then its chunk (``_update_prefill_budget``, ``schedule_policy.py:895-941``), and the
        queue stops once ``rem_input_tokens`` or ``rem_chunk_tokens`` is spent (``budget_state``,
        ``schedule_policy.py:874-893``; ``scheduler.py:4203-4207``). So no request waits admitted but unrun
        behind a chunked one, holding its prefix and loads.
        """
        inst, cfg = self.inst, self.cfg
        cache, pf = inst.cache, self.prefetcher
        budget, chunk_budget = self._budgets()
        running = len(inst.prefilling) + len(self.running_batch.decoding)
        if cfg.schedule_policy == "lpm" and 1 < len(inst.waiting) <= LPM_MAX_QUEUE:
            inst.waiting = lpm_order(cache, inst.waiting, cfg.page_tokens)
            for run in inst.waiting:
                run.queue_seq = next(inst.queue_seq)
        pf.blocked, pf.wake = 0, math.inf
        taken: set[int] = set()
        stalled = False
        now = inst.env.now
        for run in inst.waiting:
            if running >= cfg.max_running_requests or budget <= 0 or chunk_budget <= 0:
                break
            if (run.prefetch is not None and not pf.poll(run)) or (
                run.lookup_done_s > now and not pf.lookup_released(run)
            ):
                pf.blocked += 1
                continue
            adm = cache.try_admit(run.req, run.resumed, chunk_budget)
            if adm is None:
                if running == 0 and not cache.pending and not self.ctrl.acked:
                    taken.add(id(run))  # nothing will ever free room for it
                    self.drop(run)
                    continue
                inst.sim.rec.counters["admission_stalls"] += 1
                stalled = True
                break
            taken.add(id(run))
            self._add(run, adm)
            charge = min(adm.computed_tokens, chunk_budget)  # a truncated request is charged its chunk
            budget -= charge
            chunk_budget -= charge
            running += 1
        if taken:
            self._remove_taken(taken, skipped=pf.blocked > 0)
        return stalled

    def _remove_taken(self, taken: set[int], *, skipped: bool) -> None:
        """Take the admitted and dropped requests out of the queue. Without a request skipped among them they are
        its head, popped in O(taken): an overloaded instance admits a few requests a pass from a queue of
        thousands, and rebuilding the queue at every pass made such runs quadratic."""
        waiting = self.inst.waiting
        if skipped:
            self.inst.waiting = deque(r for r in waiting if id(r) not in taken)
            return
        for _ in range(len(taken)):
            waiting.popleft()

    def _budgets(self) -> tuple[int, int]:
        """This pass's ``rem_input_tokens`` and ``rem_chunk_tokens`` after the mixed decode rows and the chunks
        of the requests already admitted (``add_chunked_req``)."""
        rows = self.mixed_rows()
        budget = self.cfg.max_prefill_tokens - rows
        chunk_budget = self.cfg.chunked_prefill_size - rows
        for run in self.inst.prefilling:
            charge = max(0, min(run.prefill_left, chunk_budget))
            budget -= charge
            chunk_budget -= charge
        return budget, chunk_budget

    def _add(self, run: Running, adm: Admission | V4Admission) -> None:
        """An admitted request joins the prefilling ones, its host hit loading back."""
        inst = self.inst
        self.prefetcher.retries.pop(run.req.rid, None)  # admitted: its L3 lookups end (scheduler.py:4310-4313)
        run.adm = adm
        self._account(run, adm)
        run.prefill_left = adm.computed_tokens
        run.prefill_pos = adm.device_tokens + adm.host_tokens
        self.ctrl.load_back(run)
        inst.prefilling.append(run)

    def _account(self, run: Running, adm: Admission | V4Admission) -> None:
        """A request's cache hits are its first admission's (SGLang computes ``cached_tokens`` once; a retracted
        request is marked ``retracted_stain`` and its re-prefill's prefix, its own prompt, is no hit:
        ``managers/schedule_batch.py:2965-2990``). A re-prefill's tokens are counted apart, as SGLang's
        ``reprocessed_log_input_tokens`` / ``reprocessed_log_hit_tokens`` (``schedule_policy.py:945-952``),
        which its first-attempt hit rate leaves out (``scheduler_components/metrics_reporter.py:825-846``)."""
        if run.retractions:
            run.reprocessed_computed += adm.computed_tokens
            run.reprocessed_cached += adm.device_tokens + adm.host_tokens
            return
        req = run.req
        run.admitted_s = self.inst.env.now
        device = min(adm.device_tokens, req.input_len)
        host = min(adm.host_tokens, req.input_len - device)
        storage = min(run.prefetched_pages * self.cfg.page_tokens, host)
        run.hits = (device, host - storage, storage)

    def plan_prefill(self) -> tuple[int, float, int, float, list[Running]]:
        """Chunks of this step: (tokens, attention pairs, chunks, latest load end among them, finishing).

        SGLang keeps at most one partly prefilled request, its ``chunked_req`` (``managers/scheduler.py:4324-4327``
        asserts there is no second), and continues it first (``scheduler.py:4176-4184``). When the pools cannot
        take its next chunk, ``add_chunked_req`` leaves it out of the batch and keeps it as ``chunked_req``
        (``managers/schedule_policy.py:1147-1148, 1177-1178``): it waits, holding its KV, while the batch goes on
        with the queue (``scheduler.py:4205-4207``) and decodes free room; nothing is retracted for it. A request
        admitted but not started that the pools cannot take now is passed over (SGLang would not have admitted
        it: ``add_one_req`` answers NO_TOKEN, ``scheduler.py:4295-4311``; stopping the batch at it here can wait
        forever on room that the requests behind it hold), and none may start a second partial prefill."""
        inst = self.inst
        prefilling, now = inst.prefilling, inst.env.now
        budget = self.cfg.chunked_prefill_size - self.mixed_rows()
        tokens, pairs, chunks, loads_end, done = 0, 0.0, 0, 0.0, []
        chunked = next((r for r in prefilling if self.started(r)), None)
        if chunked is not None and prefilling[0] is not chunked:
            prefilling.remove(chunked)
            prefilling.insert(0, chunked)
        for run in prefilling:
            if tokens >= budget:
                break
            chunk = min(run.prefill_left, budget - tokens)
            if run is not chunked and chunked is not None and chunk < run.prefill_left:
                break  # it would be a second chunked request
            chunk = inst.cache.extend(run.adm, chunk)  # the cache runs the chunk: its pages allocated
            if not chunk:
                continue  # the chunked request parks; it stays chunked and waits for room
            if chunk < run.prefill_left:
                chunked = run
            pairs += attention_pairs(chunk, run.prefill_pos)
            tokens += chunk
            chunks += 1
            run.prefill_left -= chunk
            run.prefill_pos += chunk
            if run.load_done_s > now:
                loads_end = max(loads_end, run.load_done_s)
            if run.prefill_left == 0:
                done.append(run)
        return tokens, pairs, chunks, loads_end, done

    @staticmethod
    def started(run: Running) -> bool:
        """Whether ``run`` has run a prefill chunk and has prompt left: SGLang's ``chunked_req``."""
        return run.prefill_left > 0 and run.prefill_pos > run.adm.device_tokens + run.adm.host_tokens

    def mixed_rows(self) -> int:
        """Decode rows a mixed-chunk pass carries: each takes one token of the prefill budgets
        (``schedule_policy.py:637-640``, ``scheduler.py:4165``)."""
        return len(self.running_batch.decoding) if self.cfg.enable_mixed_chunk else 0
