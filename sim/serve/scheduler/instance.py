"""One instance's scheduler process: SGLang's event loop (``event_loop_overlap``, ``managers/scheduler.py:2061``)
and its batch formation (``get_next_batch_to_run``, :3894-4025).

A pass is a prefill batch, whenever one can be formed, or a decode batch over the running requests, when none
can (no one waiting, the running cap reached, no KV room, or every waiting request still reading from L3):
while prefill batches keep forming, running requests do not decode. ``enable_mixed_chunk`` (SGLang's
``--enable-mixed-chunk``, off by default) puts the decode rows into the prefill pass instead
(``scheduler.py:4375-4410``). Load-back overlaps the prefill layer by layer: a pass that carries a request's
load cannot end before the load's last layer lands plus one layer of compute. Under write_back there is no
window: a device eviction backs its victim up and waits for that D2H copy, so the next batch starts after it
lands.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol

import simpy

from sim.model.tbo import tbo_saving
from sim.serve.scheduler.cache_controller import CacheController
from sim.serve.scheduler.dp import DPGroup
from sim.serve.scheduler.instance_state import InstanceState
from sim.serve.scheduler.output import OutputStreamer
from sim.serve.scheduler.prefetch import Prefetcher
from sim.serve.scheduler.req import Running
from sim.serve.scheduler.running_batch import RunningBatch
from sim.serve.scheduler.schedule_policy import PrefillAdder
from sim.serve.state import RunState

MAX_JUMP_STEPS = 256  # decode-only steps simulated in one timeout when nothing else can happen


def first_of(env: simpy.Environment, a: simpy.Event, b: simpy.Event) -> simpy.Event:
    """An event that triggers when ``a`` or ``b`` is processed: SimPy's ``a | b`` as the scheduler waits on it,
    without the condition's value (never read): it is scheduled at the same point as ``a | b`` would be, one
    schedule per trigger, so the run's event order is the same."""
    done = env.event()

    def fire(_event: simpy.Event) -> None:
        if not done.triggered:
            done.succeed()

    for event in (a, b):
        if event.callbacks is None:  # already processed
            fire(event)
        else:
            event.callbacks.append(fire)
    return done


@dataclass(slots=True, init=False)  # its own __init__, compiled: see :mod:`sim.base.compiled`
class Batch:
    """The next pass: its prefill chunks (``tokens`` over ``chunks`` requests, ``done`` finishing their prompt),
    whether it decodes and how many rows, whether admission stalled on L1 in forming it, and whether
    ``--prefill-decode-interval`` deferred its prefill (asked once a pass: the answer counts the interval down)."""

    tokens: int
    pairs: float
    chunks: int
    loads_end: float
    done: list[Running]
    blocked: bool
    decode: bool
    n_decode: int
    deferred: bool

    def __init__(self, tokens: int, pairs: float, chunks: int, loads_end: float, done: list[Running],
                 blocked: bool, decode: bool, n_decode: int, deferred: bool) -> None:  # fmt: skip
        self.tokens, self.pairs, self.chunks, self.loads_end = tokens, pairs, chunks, loads_end
        self.done, self.blocked, self.decode, self.n_decode = done, blocked, decode, n_decode
        self.deferred = deferred


def forward_seconds(sim: RunState, b: Batch, decode_ctx: float) -> float:
    """The pass's forward by the step-time backend, the draft's passes included with speculative decoding."""
    spec = sim.cfg.spec
    if spec is None:
        return sim.roofline.step_seconds(b.tokens, b.pairs, b.n_decode, decode_ctx, b.chunks)
    if b.tokens:  # no mixed chunk with speculative decoding (schema)
        return spec.prefill_seconds(sim.roofline, b.tokens, b.pairs, b.chunks)
    return spec.decode_seconds(sim.roofline, b.n_decode, decode_ctx)


def forward_end(start: float, dt: float, loads_end: float, layers: int) -> float:
    """When a forward of ``dt`` started at ``start`` ends: its last layer waits for its load-back."""
    return max(start + dt, loads_end + dt / layers) if loads_end else start + dt


class Delayer(Protocol):
    """What the scheduler asks of SGLang's prefill delayer (:mod:`.prefill_delayer`, above the instance, as it
    reads the ranks): the next batch once the ranks agree whether it may admit; word that the rank sleeps."""

    def next_batch(self, inst: Instance) -> Generator[simpy.Event, Any, Batch | None]: ...

    def idle(self) -> None: ...


class Instance(InstanceState):
    """One serving instance (with DP attention: one rank of one): a HiCache, a waiting queue, the prefilling
    requests, and the collaborators that admit, decode, copy, prefetch and stream for it."""

    def __init__(self, sim: RunState, idx: int) -> None:
        super().__init__(sim, idx)
        self.layers = max(1, sim.cfg.model.layers)
        self.ctrl = CacheController(self)
        self.links = self.ctrl.links
        self.prefetcher = Prefetcher(self, self.links)
        self.running_batch = RunningBatch(self, self.finish, self.submit)
        self.adder = PrefillAdder(self, self.ctrl, self.prefetcher, self.running_batch, self.drop)
        self.output = OutputStreamer(sim)
        self.blocked_s = 0.0
        self.decodes_owed = 0  # --prefill-decode-interval: decode passes still owed before the next prefill
        # When each tokenizer process frees (a min-heap), and how many requests it still holds.
        self.tokenizers = [0.0] * sim.cfg.tokenizer_workers
        self.tokenizing = 0
        self.group: DPGroup | None = None  # set by the Simulation for attention-DP ranks
        self.delayer: Delayer | None = None  # --enable-prefill-delayer: set by the Simulation

    @property
    def quiescent(self) -> bool:
        """Nothing running, queued or waiting for a backup ack: what SGLang's /flush_cache waits for."""
        return not (self.load or self.cache.pending or self.ctrl.acked or self.ctrl.to_flush)

    # ----- requests in ------------------------------------------------------------------------
    def tokenize(self, run: Running) -> None:
        """Queue a new request behind the prompts its tokenizer process is still encoding, then submit it.

        SGLang's tokenizer manager encodes a text prompt on its event loop (``self.tokenizer([text])``,
        ``managers/tokenizer_manager.py:1058-1066``) before sending it to the scheduler, so prompts are encoded
        one after another per tokenizer process (``--tokenizer-worker-num``)."""
        rate = self.sim.cfg.tokenizer_tokens_per_s
        if not rate:
            self.submit(run)
            return
        now = self.env.now
        end = max(now, heapq.heappop(self.tokenizers)) + run.req.input_len / rate
        heapq.heappush(self.tokenizers, end)
        self.tokenizing += 1

        def encoded(_event: object) -> None:
            self.tokenizing -= 1
            self.submit(run)

        self.env.timeout(end - now).callbacks.append(encoded)

    def submit(self, run: Running) -> None:
        run.queue_seq = next(self.queue_seq)
        if self.sim.storage is not None:
            self.prefetcher.start(run)  # as it is queued, not when it reaches admission
        self.waiting.append(run)
        self.queued_tokens += run.req.input_len
        self.notify()

    def drop(self, run: Running) -> None:
        """A waiting request no room will ever be freed for leaves (SGLang aborts it)."""
        self.prefetcher.retries.pop(run.req.rid, None)
        self.queued_tokens -= run.req.input_len
        self.sim.rec.dropped["exceeds_kv_capacity"] += 1
        self.sim.finished_one(run.req)

    @property
    def load(self) -> int:
        return self.tokenizing + len(self.waiting) + len(self.prefilling) + len(self.running_batch.decoding)

    @property
    def load_tokens(self) -> float:
        """KV tokens the running requests hold plus the waiting prompts (the DP controller's total_tokens)."""
        return self.running_batch.decode_ctx + self.queued_tokens

    # ----- the scheduler ----------------------------------------------------------------------
    def run(self) -> Generator[simpy.Event, Any, None]:
        """The scheduler process: each turn forms the next batch, runs it and processes its results."""
        env, ctrl, rb = self.env, self.ctrl, self.running_batch
        if self.group is not None:
            self.group.active += 1
        while True:
            if not (self.waiting or self.prefilling or rb.decoding or ctrl.acked or ctrl.to_flush):
                yield from self._sleep()
                continue
            if self.wake.triggered:
                self.wake = env.event()
            t0 = env.now
            batch = self.get_next_batch_to_run() if self.delayer is None else (yield from self.delayer.next_batch(self))
            if batch is None:
                yield from self._wait_for_reads(t0)
                continue
            steps = yield from self._run_batch(batch, t0)
            self._process_batch_result(batch, steps)

    def _sleep(self) -> Generator[simpy.Event, Any, None]:
        """Nothing to run: stream what is held, and wait for a request or an ack."""
        group = self.group
        self.output.stream_out()
        if group is not None:
            group.leave()
        if self.delayer is not None:
            self.delayer.idle()
        yield self.wake
        self.wake = self.env.event()
        if group is not None:
            yield from group.enter()

    def _wait_for_reads(self, t0: float) -> Generator[simpy.Event, Any, None]:
        """Only L3 reads hold the queue: sleep until one lands (it wakes us) or a deadline passes."""
        env, group, wake = self.env, self.group, self.prefetcher.wake
        if group is not None:
            group.leave()
        yield first_of(env, env.timeout(wake - t0), self.wake) if wake < math.inf else self.wake
        if group is not None:
            yield from group.enter()

    def get_next_batch_to_run(self, allow_prefill: bool = True, deferred: bool | None = None) -> Batch | None:
        """Process the acks, re-issue due L3 lookups, then form a prefill batch unless prefill is deferred; a
        decode batch when none forms. None: only L3 reads hold the queue. ``allow_prefill`` False (the prefill
        delayer's verdict) admits no new request; the requests already prefilling go on. ``deferred``: this
        pass's :meth:`_defer_prefill`, when the delayer has asked it already (None: ask it here)."""
        cfg, ctrl, rb = self.sim.cfg, self.ctrl, self.running_batch
        ctrl.process_acks()
        self.cache.start_iteration()
        if self.sim.storage is not None:
            self.prefetcher.retry_due()
        if deferred is None:
            deferred = self._defer_prefill()
        if deferred:
            blocked, tokens, pairs, chunks, loads_end = False, 0, 0.0, 0, 0.0
            done: list[Running] = []
        else:
            blocked = self.adder.admit() if allow_prefill else False
            ctrl.charge_write_back()
            tokens, pairs, chunks, loads_end, done = self.adder.plan_prefill()
            if tokens and self.group is None:  # under DP attention the group arms every rank (DPGroup.extend_at)
                self.decodes_owed = cfg.prefill_decode_interval
        if not tokens:  # a decode forward (or none) next: its fence is its metadata reads, done at once
            self.output.stream_out()
        if self.prefetcher.blocked and not (tokens or rb.decoding or ctrl.acked or ctrl.to_flush or blocked):
            return None
        # SGLang runs a prefill batch whenever one forms and decodes only when none does; with mixed chunk
        # the decode batch rides along in the prefill's forward (scheduler.py:3992-4005, 4375-4410).
        decode = not tokens or cfg.enable_mixed_chunk
        return Batch(tokens, pairs, chunks, loads_end, done, blocked, decode, len(rb.decoding) if decode else 0,
                     deferred)  # fmt: skip

    def _defer_prefill(self) -> bool:
        """SGLang's ``--prefill-decode-interval``: after a prefill pass, that many decode passes run before the
        next prefill, while the running batch holds at least ``--prefill-decode-interval-min-bs`` requests
        (``_should_defer_prefill``, ``managers/scheduler.py:1400-1426``; under DP attention: :meth:`DPGroup.defers`).
        Alone, with nothing decoding, SGLang's deferred passes are empty loop turns: no time, so no deferral."""
        if self.group is not None:
            return self.group.defers(self.idx, len(self.running_batch.decoding))
        if not self.decodes_owed:
            return False
        decoding = self.running_batch.decoding
        if not decoding or len(decoding) < self.sim.cfg.prefill_decode_interval_min_bs:
            self.decodes_owed = 0
            return False
        return True  # the decode passes that follow pay it off (_process_batch_result)

    def _run_batch(self, b: Batch, t0: float) -> Generator[simpy.Event, Any, int]:
        """The pass's forward, timed by the step-time backend; returns the decode steps it ran. With nothing
        but decodes to run, up to ``MAX_JUMP_STEPS`` of them go in one timeout, cut short by a wake-up."""
        env, sim, rb, ctrl, group = self.env, self.sim, self.running_batch, self.ctrl, self.group
        tokens, n_decode = b.tokens, b.n_decode
        dt = forward_seconds(sim, b, rb.decode_ctx) if tokens or n_decode or not b.deferred else 0.0  # IDLE
        wait = max(0.0, ctrl.sync_until - t0)  # a write_back eviction's copy (see CacheController.charge_write_back)
        if wait:
            sim.rec.write_back_wait_s += wait
        loads_end = b.loads_end
        plain: float | None = None  # with two-batch overlap, a prefill pass's time without it (sim.model.tbo)
        threshold = sim.cfg.tbo_threshold
        if threshold is not None and tokens and group is not None:
            plain = forward_end(t0 + wait, dt, loads_end, self.layers) - t0
            dt -= tbo_saving(sim.roofline, tokens, b.pairs, b.chunks, threshold)
        end = forward_end(t0 + wait, dt, loads_end, self.layers)
        steps = 1
        jump = group is None and not (self.waiting or self.prefilling or tokens or ctrl.acked or ctrl.to_flush or wait)
        if jump and rb.decoding:
            steps = min(MAX_JUMP_STEPS, max(1, rb.decoding[0][0] - rb.step))
        if steps > 1:
            yield first_of(env, env.timeout(steps * dt), self.wake)
            steps = min(steps, max(1, math.ceil((env.now - t0) / dt - 1e-9)))
            if t0 + steps * dt > env.now:
                yield env.timeout(t0 + steps * dt - env.now)
        elif group is not None:  # the ranks' pass lasts as long as the slowest rank's
            spec_rows = self.spec.draft_tokens if self.spec is not None and not tokens else 1
            yield group.join(end - t0, tokens + n_decode * spec_rows, plain, extend=tokens > 0)
        else:
            yield env.timeout(end - t0)
        if b.blocked:
            self.blocked_s += env.now - t0
        sim.rec.counters["steps"] += steps
        return steps

    def _process_batch_result(self, b: Batch, steps: int) -> None:
        """After the forward: stream, advance and finish the decodes, end the prefills, then flush this step's
        backups as one D2H op (SGLang ``process_batch_result``, ``scheduler.py:5074``)."""
        out, ctrl, tokens = self.output, self.ctrl, b.tokens
        if tokens:  # the last prefill pass's results were processed behind this whole forward
            out.stream_out()
        out.deferring = out.late_stream and tokens > 0
        if b.decode:
            self.running_batch.advance(b.n_decode, steps)
            if not tokens and self.decodes_owed:
                self.decodes_owed = max(0, self.decodes_owed - steps)
            self.running_batch.finish_due()
        for run in b.done:
            self.prefill_done(run)
        out.deferring = False
        ctrl.to_flush.extend(self.cache.commit(None))  # backups a chunk's insert started go in this step's D2H op too
        ctrl.charge_write_back()
        ctrl.flush()

    def prefill_done(self, run: Running) -> None:
        """A request's prompt is in: its pages are committed (backups queued), its first token streams, and it
        decodes or, with one output token, finishes."""
        self.prefilling.remove(run)
        self.queued_tokens -= run.req.input_len
        self.ctrl.to_flush.extend(self.cache.commit(run.adm))
        self.output.emit(run, finished=False)
        (self.finish if run.req.output_len - run.resumed <= 1 else self.running_batch.add)(run)

    def finish(self, run: Running) -> None:
        """A request made its last token: its pages go back to the tree, and it leaves. The tree gets the KV the
        request computed, its prompt and every output token but the last (``kv_committed_len``,
        ``mem_cache/allocation.py:485, 686``; inserted at release, ``mem_cache/common.py:421``)."""
        self.cache.release(run.adm)
        self.ctrl.to_flush.extend(self.cache.commit(run.adm))  # the release's insert may start backups
        self.output.emit(run, finished=True)
