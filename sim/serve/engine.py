"""The timed model: SimPy processes that turn residency decisions into TTFT, throughput and queueing.

One arrival process feeds requests to instances through a router. Each instance runs one scheduler
process: continuous batching in passes, chunked prefill within a token budget, decode for every running
request. As in SGLang (``get_next_batch_to_run``, ``managers/scheduler.py:3894-4025``) a pass is either a
prefill batch, whenever one can be formed, or a decode batch over the running requests, when none can (no
one waiting, the running cap reached, no KV room, or every waiting request still reading from L3): while
prefill batches keep forming, running requests do not decode. ``enable_mixed_chunk`` (SGLang's
``--enable-mixed-chunk``, off by default) puts the decode rows into the prefill pass instead
(``scheduler.py:4375-4410``). ``step`` counts decode passes: decoding requests are keyed by the decode pass
they finish at, so a prefill-only pass moves none of them. Pass time comes from the scenario's step-time
backend (the roofline of :mod:`sim.model.compute`, or measured kernels, :mod:`sim.model.aic`); copies are timed
from the cost table (:mod:`sim.model.costs`) on FIFO links (H2D, D2H, and the L3 read and write links). A link is a one-server FIFO queue computed in closed form (a copy starts at
max(now, when the link frees)) whose completions are SimPy timeouts: the timeline of a capacity-1
``simpy.Resource`` with one process per copy, at one event per copy instead of four, and with the end known
when the copy is queued, which the load-back overlap needs.

Timeline of a write-through backup (DESIGN.md 1.4): *t1* the request's prefill ends and its pages are
inserted and committed as backed up (pending, device-locked); *t2* the end of that scheduler step flushes
every queued backup as one merged D2H op; *t3* the copy completes and the ack is processed at the next
scheduler step, releasing the lock (and, with L3 on, queueing TP0's write to storage).

SGLang's overlap scheduler (on by default) processes a pass's results after launching the next pass
(``event_loop_overlap``, ``scheduler.py:2061-2120``), and with HiCache on the scheduler's stream is fenced
behind the whole of a prefill forward, not just its metadata reads (``runner_utils/shared_read_event.py:35-41``;
the fence is ``scheduler.py:2013-2023``). The first tokens of a prefill pass then reach the client when the
next prefill pass ends, if one was launched; without HiCache, or with ``overlap_schedule`` off, at their own
pass's end. SGLang knows the cost: ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` turns the overlap off
between two prefill batches for the first one's TTFT (``scheduler.py:2139-2156``, off by default). Measured on
DeepSeek-V4-Flash (``measurements.md`` M1-A): with the cache on, a wave's first tokens bunch at its end (TTFT
mean / p99 0.94 at concurrency 8, against 0.76 off).

A text prompt reaches the scheduler after SGLang's tokenizer manager has encoded it, one prompt after another
per tokenizer process (``managers/tokenizer_manager.py:1058-1066``; ``tokenizer_tokens_per_s``, set by
``scenario from-sglang`` when the client sends text): requests sent together arrive one encode apart, and the
first pass of a burst may start with the first prompt alone. The rest of SGLang's path outside the passes (ZMQ
hops, the scheduler's busy poll, detokenizing one token, the HTTP stream) is not charged: microseconds to a
millisecond a request (``docs/notes/request_path.md``).

Load-back overlaps the prefill layer by layer: a step that carries a request's load cannot end before
the load's last layer lands plus one layer of compute.

Under write_back there is no window: a device eviction backs its victim up and waits for that D2H copy, so
the next batch starts after it lands. An L3 lookup is issued when a request is queued; lookups run one at a
time, as on SGLang's prefetch thread, and a read starts when its lookup ends. Admission passes over a request
whose lookup or read still runs, until the prefetch policy lets it go (DESIGN.md 1.5); a lookup that missed
holds it too, except under ``best_effort``.

With speculative decoding (:mod:`sim.model.speculative`) a decode pass is one draft-verify iteration: ``step`` still
counts passes, and a request's tokens after ``p`` of them are ``floor(p x accept_length)``. With DP attention
each rank is an ``Instance`` with its own cache; the ranks of a server step together (:class:`_DPGroup`) and
its DP controller places requests on them (:class:`_DPController`).

Same-time ordering: SimPy breaks ties FIFO by scheduling order; the arrival process is started before the
scheduler processes, so an arrival at a step boundary is seen by that boundary's admission.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.cache.hicache import Admission, BackupOp, HiCache
from sim.cache.protocol import PrefixCache
from sim.cache.radix import Node, RadixTree
from sim.cache.v4.hicache import V4Admission, V4HiCache, check_v4_setup, request_keys
from sim.cache.v4.swacache import Backup
from sim.model.compute import Roofline, attention_pairs
from sim.model.costs import CostTable
from sim.model.pools import ModelSpec
from sim.model.speculative import SpecDecode, backend_prices
from sim.serve.metrics import Recorder
from sim.serve.storage import Storage
from sim.workload.request import Request

__all__ = ["EngineConfig", "Simulation"]

MAX_JUMP_STEPS = 256  # decode-only steps simulated in one timeout when nothing else can happen
LPM_MAX_QUEUE = 128  # SGLang falls back from lpm to fcfs above this queue length (schedule_policy.py)
# In-batch prefix caching (schedule_policy.py:110-119): a waiting request with at most this many device-cached
# tokens whose prompt shares at least as many with an earlier such request is scheduled after the others.
IN_BATCH_PREFIX_TOKENS = 32
# A queued request whose L3 lookup missed is looked up again every 8 scheduling passes, at most 8 times
# (--hicache-storage-prefetch-retry-poll-interval / -max-attempts, arg_groups/fields/memory.py:181-205).
PREFETCH_RETRY_INTERVAL = 8
PREFETCH_RETRY_MAX_ATTEMPTS = 8
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS (environ.py:649)
DP_CONSERVATIVENESS = 0.3  # DP attention scales --schedule-conservativeness by 0.3 (arg_groups/parallel_hook.py:314-319)
DP_LOAD_REFRESH_S = 0.02  # the DP controller re-reads the ranks' loads at most every 20 ms (data_parallel_controller.py:346-361)



def try_admit(cache: HiCache | V4HiCache, req, page_tokens: int, resumed: int = 0, spec_reserve: int = 0):
    """Admit ``req`` into ``cache`` if its pools can take it now (None: not now): the one admission step the
    scheduler and the start check (:func:`sim.app.run.check_admissible`) share. ``spec_reserve``: the draft slots
    speculative decoding holds past the last token."""
    if isinstance(cache, V4HiCache):
        return cache.admit_request(request_keys(req, page_tokens), req.input_len + resumed, req.output_len - resumed)
    lk = cache.lookup(req.keys, req.input_len)
    extra = len(req.final_keys) - len(req.keys) if req.final_keys else 0
    if spec_reserve:  # the draft slots held past the last token, page-aligned
        total = req.input_len + req.output_len
        extra += -(-(total + spec_reserve) // page_tokens) - -(-total // page_tokens)
    adm = cache.admit(lk, extra_pages=max(0, extra))
    if adm is None:
        cache.abandon(lk)
    return adm


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs, decoupled from the YAML schema (see ``sim.app.run.build``)."""

    model: ModelSpec
    instances: int = 1
    router: str = "round_robin"
    l1_pages: int = 1000
    l2_pages: int = 0  # 0: HiCache off (L1 only)
    write_policy: str = "write_through"
    eviction_policy: str = "lru"  # SGLang's --radix-eviction-policy (sim/cache/eviction.py)
    eviction_config: dict | None = None  # and its --radix-eviction-policy-config
    load_back_threshold: int = 10
    page_tokens: int = 256
    swa_full_tokens_ratio: float = 0.1
    io_backend: str = "kernel"  # cost-table backend
    host_layout: str = "page_first"
    max_running_requests: int = 256
    schedule_policy: str = "fcfs"  # or "lpm": longest device prefix first
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    enable_mixed_chunk: bool = False  # decode rows join a prefill pass (SGLang --enable-mixed-chunk)
    overlap_schedule: bool = True  # SGLang's overlap scheduler (--disable-overlap-schedule turns it off)
    disable_consecutive_prefill_overlap: bool = False  # SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP
    prefill_decode_interval: int = 0  # --prefill-decode-interval: decode passes after a prefill before the next
    prefill_decode_interval_min_bs: int = 0  # --prefill-decode-interval-min-bs
    tokenizer_tokens_per_s: float | None = None  # text prompts are encoded at this rate before queueing
    tokenizer_workers: int = 1  # --tokenizer-worker-num
    l3_enabled: bool = False
    l3_read_Bps: float = 0.57e9
    l3_write_Bps: float = 0.16e9
    l3_latency_s: float = 1e-3
    l3_capacity_pages: int | None = None
    l3_io_batch_pages: int = 128
    l3_all_window_pages: bool = False  # L3 moves every page's window pools, not just the trailing window
    prefetch_threshold: int = 256
    prefetch_policy: str = "timeout"
    prefetch_timeout_base_s: float = 1.0
    prefetch_timeout_per_ki_token_s: float = 0.25
    duration_s: float | None = None
    sample_interval_s: float = 1.0
    record_requests: bool = True
    spec: SpecDecode | None = None  # speculative decoding (sim.model.speculative); None: one token per decode pass
    dp_size: int = 1  # attention-DP ranks per instance (DP attention): one scheduler and cache each
    dp_mlp_share: float = 0.0  # the MLP/MoE share of a rank's per-token FLOPs, run over every rank's tokens
    load_balance_method: str = "round_robin"  # how the DP controller picks a rank


@dataclass(slots=True)
class _Running:
    """A request's progress through one instance."""

    req: Request
    inst: int
    adm: Admission | V4Admission | None = None
    admitted_s: float = 0.0
    prefill_left: int = 0
    prefill_pos: int = 0
    load_done_s: float = 0.0
    load_s: float = 0.0
    first_token_s: float = 0.0
    prefetched_pages: int = 0
    prefetch: _Prefetch | None = None
    prefetch_attempts: int = 0  # L3 lookups re-issued (SGLang's storage_prefetch_retry_attempts)
    synced_step: int = 0  # V4: the step a decoding request's cache state is current at
    decode_start: int = 0  # the step its decoding began at
    resumed: int = 0  # output tokens it had made before a retraction: they are prefilled again with the prompt
    # What the record reports (see Simulation.record): the first admission's cache hits (device, host, storage);
    # after a retraction, the re-prefills' computed and cached tokens, kept apart as SGLang's "reprocessed" counts.
    hits: tuple[int, int, int] | None = None
    retractions: int = 0
    reprocessed_computed: int = 0
    reprocessed_cached: int = 0
    lookup_done_s: float = 0.0  # a missed L3 lookup holds the request until it drains (see _lookup_released)
    lookup_deadline: float | None = None  # under the timeout policy: the first poll + the base timeout


@dataclass(slots=True)
class _Prefetch:
    """An L3 read in flight for a queued request (SGLang's ``ongoing_prefetch`` entry)."""

    start: int  # first page read: the request's L1 + L2 match when the read was issued
    pages: int  # pages the read brings (storage's hit, or what the host had room for), held on the host
    swa_pages: int  # window pages held on the host with them (none for a partial read)
    requested_tokens: int  # the span asked for, which sizes the timeout and the in-flight cap
    anchor: Node  # host-locked until the read ends (unified_radix_cache.py:2168-2172)
    t_start: float
    t_end: float
    nbytes: int
    deadline: float | None = None  # set at the first blocked admission poll (timeout policy)


@dataclass
class _Link:
    """A FIFO copy stream: transfers run one after another; ``free_at`` is when the last one ends."""

    name: str
    free_at: float = 0.0
    intervals: list = field(default_factory=list)

    def submit(self, now: float, seconds: float) -> tuple[float, float]:
        start = max(now, self.free_at)
        self.free_at = start + seconds
        return start, self.free_at


class _DPGroup:
    """The attention-DP ranks of one server, stepping together.

    With DP attention every forward is a collective over the ranks: each rank forms its own batch (prefill or
    decode), the ranks all-gather their token counts, and a rank with nothing to run joins with an IDLE batch
    whenever any rank has work (``managers/scheduler_components/dp_attn.py:518-676``), because the MoE layers
    run over the gathered tokens of all ranks. So a pass starts when every rank that has work has planned it,
    and lasts as long as the slowest rank's, where each rank's time is its own pass plus the MLP/MoE work of the
    other ranks' tokens (``mlp_share`` of their linear-layer cost, priced by the step-time backend as prefill
    tokens); a rank that wakes mid-pass waits for it to end. ``active`` counts the ranks that are planning a
    pass (not asleep, not yet joined). The pass starts once the current instant's other events have run, so
    ranks woken at the same time (a burst dispatched at once) share it.
    """

    def __init__(self, env: simpy.Environment, backend, mlp_share: float) -> None:
        self.env, self.backend, self.mlp_share = env, backend, mlp_share
        self.active = 0
        self.joined = 0
        self.plans: list[tuple[float, int]] = []  # (seconds on its own, tokens through the MLP) per joined rank
        self.go = env.event()
        self.busy_until = 0.0
        self.starting = False

    def enter(self):
        """A rank woke: it plans with the others, after any pass in flight."""
        self.active += 1
        if self.busy_until > self.env.now:
            yield self.env.timeout(self.busy_until - self.env.now)

    def leave(self) -> None:
        """A rank sleeps (nothing to run): the others do not wait for it."""
        self.active -= 1
        self._ready()

    def join(self, seconds: float, tokens: int) -> simpy.Event:
        """A rank planned a pass of ``seconds`` on its own over ``tokens`` tokens; the event fires when the
        group's pass ends."""
        self.joined += 1
        self.active -= 1
        self.plans.append((seconds, tokens))
        go = self.go
        self._ready()
        return go

    def _ready(self) -> None:
        if not self.active and self.joined and not self.starting:
            self.starting = True
            self.env.timeout(0).callbacks.append(self._start)

    def _start(self, _event) -> None:
        self.starting = False
        if self.active or not self.joined:  # a rank woke at this instant and is still planning
            return
        go, seconds = self.go, self._seconds()
        self.busy_until = self.env.now + seconds
        self.active, self.joined, self.plans = self.joined, 0, []  # they all plan again when it ends
        self.go = self.env.event()
        self.env.timeout(seconds).callbacks.append(lambda _e: go.succeed())

    def _seconds(self) -> float:
        plans = self.plans
        if not self.mlp_share or len(plans) == 1:
            return max(s for s, _ in plans)
        total, backend = sum(t for _, t in plans), self.backend
        overhead = getattr(backend, "overhead_s", 0.0)
        return max(s + self.mlp_share * (backend.step_seconds(total - t, 0.0, 0, 0.0) - overhead) if total > t else s
                   for s, t in plans)  # fmt: skip


class _DPController:
    """SGLang's DP controller for one server: places each request on an attention-DP rank
    (``managers/data_parallel_controller.py:105-145, 880-925``).

    round_robin cycles the ranks; total_requests and total_tokens pick the rank with the fewest running + waiting
    requests (or tokens, requests breaking ties) and add the request to its count, re-reading the ranks' loads
    at most every 20 ms, so a burst spreads on the counts; follow_bootstrap_room takes the request's bootstrap
    room modulo the ranks (PD prefill; the request id stands in for the room). A rank's tokens are its running
    requests' KV and its queue's prompts (``load_inquirer.py:141-147``).
    """

    def __init__(self, method: str, ranks: list) -> None:
        self.method, self.ranks = method, ranks
        self.counter = 0
        self.requests = [0] * len(ranks)
        self.tokens = [0.0] * len(ranks)
        self.refreshed = -math.inf

    def pick(self, req: Request, now: float):
        n = len(self.ranks)
        if self.method == "round_robin":
            i = self.counter % n
            self.counter += 1
        elif self.method == "follow_bootstrap_room":
            i = req.rid % n
        else:
            if now - self.refreshed >= DP_LOAD_REFRESH_S:
                self.refreshed = now
                self.requests = [r.load for r in self.ranks]
                self.tokens = [r.load_tokens for r in self.ranks]
            if self.method == "total_requests":
                i = self.requests.index(min(self.requests))
            else:
                i = min(range(n), key=lambda k: (self.tokens[k], self.requests[k]))
                self.tokens[i] += req.input_len
            self.requests[i] += 1
        return self.ranks[i]


class Instance:
    """One serving instance (with DP attention: one rank of one): a HiCache, a waiting queue, running requests
    and its copy links."""

    def __init__(self, sim: Simulation, idx: int) -> None:
        self.sim, self.idx, self.env = sim, idx, sim.env
        self.spec = sim.cfg.spec
        self.accept = self.spec.accept_length if self.spec else 1  # context tokens a decode pass adds per request
        self.cache = self._new_cache()
        self.v4 = isinstance(self.cache, V4HiCache)
        self.v4_due: list[tuple[int, int, _Running]] = []  # V4 decodes by the step of their next page
        self.waiting: deque[_Running] = deque()
        self.prefilling: list[_Running] = []
        self.decoding: list[tuple[int, int, _Running]] = []  # (finish step, rid, request)
        self.decode_ctx = 0
        self.step = 0  # decode passes run: a prefill-only pass advances no decoding request
        self.to_flush: list[BackupOp] = []
        self.acked: list[BackupOp] = []
        # l3_lookup: SGLang's prefetch thread, which runs one storage lookup at a time (cache_controller.py:1333-1366)
        self.links = {name: _Link(name) for name in ("h2d", "d2h", "l3_read", "l3_write", "l3_lookup")}
        self.wake = self.env.event()
        self.idle = False
        self.blocked_s = 0.0
        self.sync_until = 0.0  # a write_back eviction's D2H copy holds the next batch until then
        # L3 reads (SGLang's cache controller and StoragePrefetchRetries): requested tokens in flight, capped
        # at half the host pool; queued requests whose lookup is re-issued at a later pass; this pass's
        # requests skipped while their read runs, and the earliest deadline among them.
        self.prefetch_tokens = 0
        self.prefetch_cap = 0.5 * sim.cfg.l2_pages * sim.cfg.page_tokens
        self.retries: dict[int, int | None] = {}  # rid -> pass at which the lookup is re-issued
        self.passes = 0
        self.prefetch_blocked = 0
        self.prefetch_wake = math.inf
        # Results of the last prefill pass not yet streamed (request, finished): with HiCache on, they reach the
        # client when the next prefill forward ends (module docstring).
        self.late_stream = (sim.cfg.overlap_schedule and not sim.cfg.disable_consecutive_prefill_overlap
                            and sim.cfg.l2_pages > 0)  # fmt: skip
        self.decodes_owed = 0  # --prefill-decode-interval: decode passes still owed before the next prefill
        self.unstreamed: list[tuple[_Running, bool]] = []
        self.deferring = False
        # When each tokenizer process frees (a min-heap), and how many requests it still holds.
        self.tokenizers = [0.0] * sim.cfg.tokenizer_workers
        self.tokenizing = 0
        self.group: _DPGroup | None = None  # set by the Simulation for attention-DP ranks

    def _new_cache(self) -> PrefixCache:
        """SGLang's V4 cache for a model with a sliding window (exact, :mod:`sim.cache.v4.swacache`), else HiCache."""
        cfg = self.sim.cfg
        if cfg.model.has_swa:
            check_v4_setup(cfg.model, page_tokens=cfg.page_tokens, write_policy=cfg.write_policy,
                           eviction_policy=cfg.eviction_policy)  # fmt: skip
            return V4HiCache(cfg.model, l1_pages=cfg.l1_pages, l2_pages=cfg.l2_pages, policy=cfg.write_policy,
                             load_back_threshold=cfg.load_back_threshold, page_tokens=cfg.page_tokens,
                             swa_full_tokens_ratio=cfg.swa_full_tokens_ratio,
                             chunked_prefill_size=cfg.chunked_prefill_size,
                             decode_lookahead=cfg.spec.reserve if cfg.spec else 0,
                             conservativeness=DP_CONSERVATIVENESS if cfg.dp_size > 1 else 1.0)  # fmt: skip
        return HiCache(cfg.model, l1_pages=cfg.l1_pages, l2_pages=cfg.l2_pages, policy=cfg.write_policy,
                       load_back_threshold=cfg.load_back_threshold, page_tokens=cfg.page_tokens,
                       eviction_policy=cfg.eviction_policy, eviction_config=cfg.eviction_config)  # fmt: skip

    @property
    def quiescent(self) -> bool:
        """Nothing running, queued or waiting for a backup ack: what SGLang's /flush_cache waits for."""
        return not (self.load or self.cache.pending or self.acked or self.to_flush)

    def flush_cache(self) -> None:
        """SGLang's ``/flush_cache`` on a quiescent instance: L1 and L2 emptied, counters kept, L3 untouched."""
        stats = self.cache.stats
        self.cache = self._new_cache()
        self.cache.stats = stats

    # ----- wiring -----------------------------------------------------------------------------
    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def tokenize(self, run: _Running) -> None:
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

        def encoded(_event) -> None:
            self.tokenizing -= 1
            self.submit(run)

        self.env.timeout(end - now).callbacks.append(encoded)

    def submit(self, run: _Running) -> None:
        if self.sim.storage is not None:
            self._start_prefetch(run)  # as it is queued, not when it reaches admission
        self.waiting.append(run)
        self.notify()

    @property
    def load(self) -> int:
        return self.tokenizing + len(self.waiting) + len(self.prefilling) + len(self.decoding)

    @property
    def load_tokens(self) -> float:
        """KV tokens the running requests hold plus the waiting prompts (the DP controller's total_tokens)."""
        queued = sum(r.req.input_len for r in self.waiting) + sum(r.req.input_len for r in self.prefilling)
        return self.decode_ctx + queued

    # ----- the scheduler ----------------------------------------------------------------------
    def run(self):
        env, sim, cfg = self.env, self.sim, self.sim.cfg
        roofline = sim.roofline
        layers = max(1, cfg.model.layers)
        mixed = cfg.enable_mixed_chunk
        group = self.group
        if group is not None:
            group.active += 1
        while True:
            if not (self.waiting or self.prefilling or self.decoding or self.acked or self.to_flush):
                self._stream_out()
                self.idle = True
                if group is not None:
                    group.leave()
                yield self.wake
                self.wake = env.event()
                self.idle = False
                if group is not None:
                    yield from group.enter()
                continue
            if self.wake.triggered:
                self.wake = env.event()
            t0 = env.now
            self._process_acks()
            if sim.storage is not None:
                self._retry_prefetches()
            if self._defer_prefill():
                blocked, tokens, pairs, chunks, loads_end, done = False, 0, 0, 0, 0.0, []
            else:
                blocked = self._admit()
                self._charge_write_back()
                tokens, pairs, chunks, loads_end, done = self._plan_prefill()
                if tokens:
                    self.decodes_owed = cfg.prefill_decode_interval
            if not tokens:  # a decode forward (or none) next: its fence is its metadata reads, done at once
                self._stream_out()
            if self.prefetch_blocked and not (tokens or self.decoding or self.acked or self.to_flush or blocked):
                # Only L3 reads hold the queue: sleep until one lands (it wakes us) or a deadline passes.
                wake = self.prefetch_wake
                if group is not None:
                    group.leave()
                yield (env.timeout(wake - t0) | self.wake) if wake < math.inf else self.wake
                if group is not None:
                    yield from group.enter()
                continue
            # SGLang runs a prefill batch whenever one forms and decodes only when none does; with mixed chunk
            # the decode batch rides along in the prefill's forward (scheduler.py:3992-4005, 4375-4410).
            decode = not tokens or mixed
            n_decode = len(self.decoding) if decode else 0
            if self.spec is None:
                dt = roofline.step_seconds(tokens, pairs, n_decode, self.decode_ctx, chunks)
            elif tokens:  # no mixed chunk with speculative decoding (schema)
                dt = self.spec.prefill_seconds(roofline, tokens, pairs, chunks)
            else:
                dt = self.spec.decode_seconds(roofline, n_decode, self.decode_ctx)
            wait = max(0.0, self.sync_until - t0)  # a write_back eviction's copy (see _charge_write_back)
            if wait:
                sim.rec.counters["sim_write_back_wait_seconds_total"] += wait
            end = max(t0 + wait + dt, loads_end + dt / layers) if loads_end else t0 + wait + dt
            steps = 1
            jump = group is None and not (self.waiting or self.prefilling or tokens or self.acked or self.to_flush or wait)
            if jump and self.decoding:
                steps = min(MAX_JUMP_STEPS, max(1, self.decoding[0][0] - self.step))
            if steps > 1:
                yield env.timeout(steps * dt) | self.wake
                steps = min(steps, max(1, math.ceil((env.now - t0) / dt - 1e-9)))
                if t0 + steps * dt > env.now:
                    yield env.timeout(t0 + steps * dt - env.now)
            elif group is not None:  # the ranks' pass lasts as long as the slowest rank's
                spec_rows = self.spec.draft_tokens if self.spec is not None and not tokens else 1
                yield group.join(end - t0, tokens + n_decode * spec_rows)
            else:
                yield env.timeout(end - t0)
            if blocked:
                self.blocked_s += env.now - t0
            sim.rec.counters["steps"] += steps
            if tokens:  # the last prefill pass's results were processed behind this whole forward
                self._stream_out()
            self.deferring = self.late_stream and tokens > 0
            if decode:
                self.decode_ctx += n_decode * steps * self.accept
                self.step += steps
                if not tokens and self.decodes_owed:
                    self.decodes_owed = max(0, self.decodes_owed - steps)
                self._finish_decodes()
            for run in done:
                self._prefill_done(run)
            self.deferring = False
            if self.v4:  # backups a chunk's insert started go in this step's D2H op too
                self.to_flush.extend(self.cache.commit(None))
            self._charge_write_back()
            self._flush()

    def _defer_prefill(self) -> bool:
        """SGLang's ``--prefill-decode-interval``: after a prefill pass, that many decode passes run before the
        next prefill, while the running batch holds at least ``--prefill-decode-interval-min-bs`` requests
        (``_should_defer_prefill`` / ``_arm_prefill_decode_interval``, ``managers/scheduler.py:1400-1426``).
        With nothing decoding, SGLang's deferred passes are empty loop turns: no time, so no deferral here."""
        if not self.decodes_owed:
            return False
        if not self.decoding or len(self.decoding) < self.sim.cfg.prefill_decode_interval_min_bs:
            self.decodes_owed = 0
            return False
        return True  # the decode passes that follow pay it off (run)

    def _process_acks(self) -> None:
        if not self.acked:
            return
        ops, self.acked = self.acked, []
        for op in ops:
            self.cache.ack(op)
            if self.sim.storage is not None:
                self._write_storage(op)

    def _admit(self) -> bool:
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
        cfg, cache, sim = self.sim.cfg, self.cache, self.sim
        budget = cfg.max_prefill_tokens - self._mixed_rows()
        chunk_budget = cfg.chunked_prefill_size - self._mixed_rows()
        for run in self.prefilling:  # this pass's chunks of the requests already admitted
            charge = max(0, min(run.prefill_left, chunk_budget))
            budget -= charge
            chunk_budget -= charge
        running = len(self.prefilling) + len(self.decoding)
        if cfg.schedule_policy == "lpm" and 1 < len(self.waiting) <= LPM_MAX_QUEUE:
            self.waiting = self._lpm_order()
        self.prefetch_blocked, self.prefetch_wake = 0, math.inf
        taken: set[int] = set()
        stalled = False
        now = self.env.now
        for run in self.waiting:
            if running >= cfg.max_running_requests or budget <= 0 or chunk_budget <= 0:
                break
            if (run.prefetch is not None and not self._poll_prefetch(run)) or (
                run.lookup_done_s > now and not self._lookup_released(run)
            ):
                self.prefetch_blocked += 1
                continue
            req = run.req
            adm = try_admit(cache, req, cfg.page_tokens, run.resumed, self.spec.reserve if self.spec else 0)
            if adm is None:
                if running == 0 and not cache.pending and not self.acked:
                    taken.add(id(run))  # nothing will ever free room for it
                    self.retries.pop(req.rid, None)
                    sim.rec.dropped["exceeds_kv_capacity"] += 1
                    sim.finished_one(req)
                    continue
                sim.rec.counters["admission_stalls"] += 1
                stalled = True
                break
            taken.add(id(run))
            self.retries.pop(req.rid, None)  # admitted: no more L3 lookups (scheduler.py:4310-4313)
            run.adm = adm
            self._account_admission(run, adm)
            run.prefill_left = adm.computed_tokens
            run.prefill_pos = adm.device_tokens + adm.host_tokens
            load_swa = adm.load_swa_pages if cache.window else 0
            if adm.load_kv_pages or load_swa:
                seconds = sim.transfer_seconds("h2d", adm.load_kv_pages, load_swa, cache)
                start, end = self.links["h2d"].submit(self.env.now, seconds)
                sim.rec.transfer(self.idx, "h2d", start, end,
                                 sum(cache.pool_bytes(adm.load_kv_pages, load_swa).values()))  # fmt: skip
                run.load_done_s = end
                run.load_s += end - self.env.now  # every admission's load-back, a re-prefill's too
            self.prefilling.append(run)
            charge = min(adm.computed_tokens, chunk_budget)  # a truncated request is charged its chunk
            budget -= charge
            chunk_budget -= charge
            running += 1
        if taken:
            self.waiting = deque(r for r in self.waiting if id(r) not in taken)
        return stalled

    def _account_admission(self, run: _Running, adm: Admission | V4Admission) -> None:
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
        run.admitted_s = self.env.now
        device = min(adm.device_tokens, req.input_len)
        host = min(adm.host_tokens, req.input_len - device)
        storage = min(run.prefetched_pages * self.sim.cfg.page_tokens, host)
        run.hits = (device, host - storage, storage)

    def _lpm_order(self) -> deque[_Running]:
        """The waiting queue in SGLang's lpm order (``schedule_policy.py:346-395, 441-450``): most device +
        host matched tokens first, as the match reports them after the window check and the
        ``input_len - 1`` cap (``mem_cache/common.py:244-261``); ties keep queue order. A request with
        (almost) nothing cached on device whose prompt shares a prefix with an earlier such request waiting
        goes last, so that one computes the shared prefix and the others then hit it. The waiting requests'
        prompts are compared page by page here (SGLang compares tokens). Like SGLang's, each match refreshes
        the path's LRU time."""
        cache, pt = self.cache, self.sim.cfg.page_tokens
        waiting_tree = RadixTree(pt)
        keys: list[float] = []
        for run in self.waiting:
            lk = cache.lookup(run.req.keys, run.req.input_len)
            cache.abandon(lk)
            if lk.device_pages * pt <= IN_BATCH_PREFIX_TOKENS:
                if waiting_tree.match(run.req.keys).device_pages * pt >= IN_BATCH_PREFIX_TOKENS:
                    keys.append(math.inf)
                    continue
                waiting_tree.insert(run.req.keys)
            keys.append(-(lk.device_pages + lk.host_pages))
        order = sorted(range(len(keys)), key=keys.__getitem__)
        return deque(self.waiting[i] for i in order)

    def _plan_prefill(self) -> tuple[int, float, int, float, list[_Running]]:
        """Chunks of this step: (tokens, attention pairs, chunks, latest load end among them, finishing).

        SGLang keeps at most one partly prefilled request, its ``chunked_req`` (``managers/scheduler.py:4324-4327``
        asserts there is no second), and continues it first (``scheduler.py:4176-4184``). When the pools cannot
        take its next chunk, ``add_chunked_req`` leaves it out of the batch and keeps it as ``chunked_req``
        (``managers/schedule_policy.py:1147-1148, 1177-1178``): it waits, holding its KV, while the batch goes on
        with the queue (``scheduler.py:4205-4207``) and decodes free room; nothing is retracted for it. A request
        admitted but not started that the pools cannot take now is passed over (SGLang would not have admitted
        it: ``add_one_req`` answers NO_TOKEN, ``scheduler.py:4295-4311``; stopping the batch at it here can wait
        forever on room that the requests behind it hold), and none may start a second partial prefill."""
        budget = self.sim.cfg.chunked_prefill_size - self._mixed_rows()
        tokens, pairs, chunks, loads_end, done = 0, 0.0, 0, 0.0, []
        chunked = next((r for r in self.prefilling if self._started(r)), None)
        if chunked is not None and self.prefilling[0] is not chunked:
            self.prefilling.remove(chunked)
            self.prefilling.insert(0, chunked)
        for run in self.prefilling:
            if tokens >= budget:
                break
            chunk = min(run.prefill_left, budget - tokens)
            if run is not chunked and chunked is not None and chunk < run.prefill_left:
                break  # it would be a second chunked request
            if self.v4:  # the cache runs the chunk: pages allocated, a non-final chunk inserted
                chunk = self.cache.extend(run.adm, chunk)
                if not chunk:
                    continue  # the chunked request parks; it stays chunked and waits for room
                if chunk < run.prefill_left:
                    chunked = run
            pairs += attention_pairs(chunk, run.prefill_pos)
            tokens += chunk
            chunks += 1
            run.prefill_left -= chunk
            run.prefill_pos += chunk
            if run.load_done_s > self.env.now:
                loads_end = max(loads_end, run.load_done_s)
            if run.prefill_left == 0:
                done.append(run)
        return tokens, pairs, chunks, loads_end, done

    def _started(self, run: _Running) -> bool:
        """Whether ``run`` has run a prefill chunk and has prompt left: SGLang's ``chunked_req``."""
        return run.prefill_left > 0 and run.prefill_pos > run.adm.device_tokens + run.adm.host_tokens

    def _mixed_rows(self) -> int:
        """Decode rows a mixed-chunk pass carries: each takes one token of the prefill budgets
        (``schedule_policy.py:637-640``, ``scheduler.py:4165``)."""
        return len(self.decoding) if self.sim.cfg.enable_mixed_chunk else 0

    def _prefill_done(self, run: _Running) -> None:
        self.prefilling.remove(run)
        self.to_flush.extend(self.cache.commit(run.adm))
        self._emit(run, finished=False)
        if run.req.output_len - run.resumed <= 1:
            self._finish(run)
        else:
            run.decode_start = self.step
            heapq.heappush(self.decoding, (self._pass_at(run, run.req.output_len - run.resumed - 1), run.req.rid, run))
            self.decode_ctx += run.req.input_len + run.resumed
            if self.v4:
                run.synced_step = self.step
                heapq.heappush(self.v4_due, (self._pass_at(run, self.cache.steps_to_page(run.adm)), run.req.rid, run))

    def _pass_at(self, run: _Running, tokens: int) -> int:
        """The decode pass (``step``) by which ``run`` has made ``tokens`` tokens after its prefill."""
        return run.decode_start + (tokens if self.spec is None else self.spec.passes_for(tokens))

    def _made(self, run: _Running, step: int) -> int:
        """Tokens ``run`` has made after its prefill by decode pass ``step``."""
        passes = step - run.decode_start
        return passes if self.spec is None else self.spec.tokens_after(passes)

    def _finish_decodes(self) -> None:
        if self.v4:
            self._sync_decodes()
        while self.decoding and self.decoding[0][0] <= self.step:
            key, _, run = heapq.heappop(self.decoding)
            if self.v4 and not self._sync(run, run.req.output_len):
                continue
            self.decode_ctx -= run.req.input_len + run.resumed + (key - run.decode_start) * self.accept
            self._finish(run)

    def _sync_decodes(self) -> None:
        """V4: bring every decoding request whose next page falls in the steps just run up to date."""
        due = self.v4_due
        while due and due[0][0] <= self.step:
            _, rid, run = heapq.heappop(due)
            if run.adm.run.finished:
                continue
            if self._sync(run, self._made(run, self.step) - self._made(run, run.synced_step)) and not run.adm.run.finished:
                made = self._made(run, self.step)
                heapq.heappush(due, (self._pass_at(run, made + self.cache.steps_to_page(run.adm)), rid, run))

    def _sync(self, run: _Running, steps: int) -> bool:
        """Run ``steps`` decode tokens of a V4 request in the cache; False if it was retracted.

        When a pool runs dry even after eviction, SGLang retracts decoding requests, fewest output tokens
        first and then the longest prompt, until the step fits, always keeping one
        (``managers/schedule_batch.py:3451-3580``). Here the step that did not fit is this request's, so
        victims go until it fits or it is the victim itself. The other requests' progress is read from the
        decode steps run, as their cache state is brought up to date lazily."""
        r = run.adm.run
        target = r.emitted + steps
        while True:
            try:
                self.cache.decode(run.adm, target - r.emitted)
            except MemoryError:
                live = [x for _, _, x in self.decoding]
                if all(x is not run for x in live):  # the caller took it off the heap
                    live.append(run)
                if len(live) <= 1:  # nothing left to retract: SGLang aborts it (schedule_batch.py:3508-3530)
                    self._retract(run, requeue=False)
                    self.sim.rec.dropped["out_of_memory"] += 1
                    self.sim.finished_one(run.req)
                    return False
                victim = min(live, key=lambda x: (self._outputs(x), -x.req.input_len))
                live = [x for x in live if x is not victim]
                self._retract(victim, keep_free=len(live) * RETRACT_DECODE_STEPS)
                # the admission estimate restarts from what the survivors made (new_token_ratio_tracker.py:41-49)
                made = sum(self._outputs(x) for x in live) + RETRACT_DECODE_STEPS * len(live)
                self.cache.new_token_ratio = min(1.0, made / (sum(x.req.output_len for x in live) + 1))
                if victim is run:
                    return False
                continue
            run.synced_step = self.step
            return True

    def _outputs(self, run: _Running) -> int:
        """Output tokens a decoding request has made by now (its prefill made the first)."""
        return run.resumed + 1 + self._made(run, self.step)

    def _retract(self, run: _Running, requeue: bool = True, keep_free: int = 0) -> None:
        """Free a decoding request's KV uncached (and ``keep_free`` tokens for the requests that stay) and queue
        it again at the back, to prefill its prompt and the outputs it made so far (``scheduler.py:4536-4537``,
        ``schedule_batch.py:2049-2089, 2388-2392``)."""
        self.cache.retract(run.adm, keep_free)
        for heap in (self.decoding, self.v4_due):  # in place: the callers' loops hold these lists
            heap[:] = [e for e in heap if e[2] is not run]
            heapq.heapify(heap)
        self.decode_ctx -= run.req.input_len + run.resumed + (self.step - run.decode_start) * self.accept
        if requeue:
            made = min(self._outputs(run), run.req.output_len - 1)
            counters = self.sim.rec.counters  # SGLang's retraction counters (scheduler.py:4502-4512)
            counters["num_retracted_requests_total"] += 1
            counters["num_retracted_input_tokens_total"] += run.req.input_len
            counters["num_retracted_output_tokens_total"] += made
            self.submit(_Running(run.req, run.inst, admitted_s=run.admitted_s, load_s=run.load_s,
                                 first_token_s=run.first_token_s, resumed=made, hits=run.hits,
                                 retractions=run.retractions + 1, reprocessed_computed=run.reprocessed_computed,
                                 reprocessed_cached=run.reprocessed_cached))  # fmt: skip

    def _finish(self, run: _Running) -> None:
        if run.req.final_keys and not self.v4:
            self.to_flush.extend(self.cache.commit(run.adm, run.req.final_keys))
        self.cache.release(run.adm)
        if self.v4:  # the release's insert may start backups
            self.to_flush.extend(self.cache.commit(run.adm))
        self._emit(run, finished=True)

    def _emit(self, run: _Running, finished: bool) -> None:
        """Stream a request's first token (a retracted request keeps its own) or its finish, now or, while
        ``deferring``, when the next prefill forward ends."""
        if self.deferring:
            self.unstreamed.append((run, finished))
            return
        run.first_token_s = run.first_token_s or self.env.now
        if finished:
            self.sim.record(run, self.env.now)

    def _stream_out(self) -> None:
        pending, self.unstreamed = self.unstreamed, []
        for run, finished in pending:
            self._emit(run, finished)

    def _flush(self) -> None:
        """End of a scheduler step: one merged D2H op for every backup queued during it (t2)."""
        if not self.to_flush:
            return
        ops, self.to_flush = self.to_flush, []
        kv = sum(op.kv_pages for op in ops)
        swa = sum(op.swa_pages for op in ops) if self.cache.window else 0
        sim = self.sim
        seconds = sim.transfer_seconds("d2h", kv, swa, self.cache)
        start, end = self.links["d2h"].submit(self.env.now, seconds)
        sim.rec.transfer(self.idx, "d2h", start, end, sum(self.cache.pool_bytes(kv, swa).values()))
        sim.rec.counters["backup_flushes"] += 1

        def acked(_event, ops=ops) -> None:
            self.acked.extend(ops)
            self.notify()

        self.env.timeout(end - self.env.now).callbacks.append(acked)

    # ----- write_back -------------------------------------------------------------------------
    def _charge_write_back(self) -> None:
        """A write_back eviction waits for the D2H copy of what it evicts: SGLang submits the copy and
        synchronizes on it before the eviction goes on (``unified_radix_cache.py:1028-1036, 1647-1663,
        3478-3489``). Each copy goes on the D2H link now and the scheduler launches no batch before it
        lands; with L3 on, its pages go to storage after that ack, as any backup's do (:1803-1818)."""
        copies = self.cache.write_back_copies
        if not copies:
            return
        sim, cache = self.sim, self.cache
        for ops in copies:
            kv = sum(op.kv_pages for op in ops)
            swa = sum(op.swa_pages for op in ops) if cache.window else 0
            start, end = self.links["d2h"].submit(self.env.now, sim.transfer_seconds("d2h", kv, swa, cache))
            sim.rec.transfer(self.idx, "d2h", start, end, sum(cache.pool_bytes(kv, swa).values()))
            self.sync_until = max(self.sync_until, end)
            if sim.storage is not None:  # the keys as they are now: the nodes may be split or evicted later
                writes = [_storage_pages(op, cache.window is not None) for op in ops]
                self.env.timeout(end - self.env.now).callbacks.append(
                    lambda _e, writes=writes: [self._write_pages(*w) for w in writes])
        copies.clear()

    # ----- L3 ---------------------------------------------------------------------------------
    def _write_storage(self, op: BackupOp) -> None:
        """After the ack, TP0 writes the pages to storage."""
        self._write_pages(*_storage_pages(op, self.cache.window is not None))

    def _write_pages(self, keys: list, window: bool, swa_pages: int) -> None:
        """Write pages to storage; they are readable, and counted in ``backuped_tokens_total``, once the
        write lands (SGLang counts at the storage write ack, ``unified_radix_cache.py:3240-3260``)."""
        if not keys:
            return
        sim, cfg = self.sim, self.sim.cfg
        swa = len(keys) if cfg.l3_all_window_pages and window else swa_pages
        nbytes = sum(self.cache.pool_bytes(len(keys), swa).values())
        seconds = nbytes / cfg.l3_write_Bps + cfg.l3_latency_s * math.ceil(len(keys) / cfg.l3_io_batch_pages)
        start, end = self.links["l3_write"].submit(self.env.now, seconds)
        sim.rec.transfer(self.idx, "l3_write", start, end, nbytes)

        def written(_event) -> None:
            sim.storage.put(keys, window)
            sim.rec.counters["backuped_tokens_total"] += len(keys) * cfg.page_tokens

        self.env.timeout(end - self.env.now).callbacks.append(written)

    def _start_prefetch(self, run: _Running) -> None:
        """Issue an L3 read for a request as it is queued (SGLang ``_add_request_to_queue`` ->
        ``_prefetch_kvcache``, ``scheduler.py:3342-3391, 3474-3492``; ``prefetch_from_storage``,
        ``unified_radix_cache.py:2081-2257``).

        The span after the request's L1 + L2 match is asked for only if the match ends on a backed-up node
        (an unbacked one is a certain miss, ``scheduler.py:3364-3370``) and is at least the threshold
        (no lookup, no retry otherwise). A storage hit below the threshold, or a read refused because the
        reads in flight already ask for half the host pool (``cache_controller.py:628-638, 1269-1286``),
        is looked up again later (:meth:`_retry_prefetches`; ``unified_radix_cache.py:2154-2158,
        3162-3181``). The read's pages land in L2 when it ends or is cut short at admission.
        """
        sim, cfg, cache = self.sim, self.sim.cfg, self.cache
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
        if self.prefetch_tokens >= self.prefetch_cap:
            counters["sim_prefetch_rate_limited_total"] += 1
            self.retries[req.rid] = None
            return
        hit = sim.storage.hit_pages(req.keys, start, stop)
        counters["storage_prefetch_hit_tokens_total"] += hit * pt
        # The lookup asks batch by batch and stops at the first batch with a miss (cache_controller.py:1308-1330).
        batch = cfg.l3_io_batch_pages
        calls = min(-(-(stop - start) // batch), hit // batch + 1)
        _, looked_up = self.links["l3_lookup"].submit(self.env.now, cfg.l3_latency_s * calls)
        if hit * pt < threshold:
            counters["storage_prefetch_unfulfilled_tokens_total:below_threshold"] += hit * pt
            self.retries[req.rid] = None
            run.lookup_done_s, run.lookup_deadline = looked_up, None
            return
        cache.tree.host_lock(anchor)  # not evicted to make room for its own read
        window_pages = cache.window.pages if cache.window else 0
        pages = cache.reserve_host(hit, window_pages, -(-threshold // pt))
        if pages < hit:  # SGLang: host_capacity (unified_radix_cache.py:3111-3140)
            counters["storage_prefetch_unfulfilled_tokens_total:host_capacity"] += (hit - pages) * pt
        if not pages:
            cache.tree.host_unlock(anchor)
            self.retries[req.rid] = None
            return
        window = pages if cfg.l3_all_window_pages else window_pages  # EIC reads whole pages per pool
        swa = window if pages == hit and window_pages else 0
        sim.storage.touch(req.keys[start : start + pages])  # read: most recently used
        nbytes = sum(cache.pool_bytes(pages, swa).values())
        seconds = nbytes / cfg.l3_read_Bps + cfg.l3_latency_s * math.ceil(pages / cfg.l3_io_batch_pages)
        t_start, t_end = self.links["l3_read"].submit(looked_up, seconds)
        self.prefetch_tokens += requested
        pf = run.prefetch = _Prefetch(start, pages, swa, requested, anchor, t_start, t_end, nbytes)
        counters["sim_prefetches_total"] += 1
        counters["sim_prefetch_requested_tokens_total"] += requested

        def landed(_event) -> None:
            if run.prefetch is pf:  # not cut short at admission
                self._end_prefetch(run, pf.pages)
                self.notify()

        self.env.timeout(t_end - self.env.now).callbacks.append(landed)

    def _lookup_released(self, run: _Running) -> bool:
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
        self.prefetch_wake = min(self.prefetch_wake, wake)
        return False

    def _poll_prefetch(self, run: _Running) -> bool:
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
                self.prefetch_wake = min(self.prefetch_wake, pf.deadline)
                return False
        span = pf.t_end - pf.t_start
        done = int(pf.pages * min(1.0, max(0.0, now - pf.t_start) / span)) if span > 0 else pf.pages
        link = self.links["l3_read"]
        if done < pf.pages and link.free_at == pf.t_end:  # nothing queued behind: the rest is cancelled
            link.free_at = pf.t_end = max(now, pf.t_start)
        self._end_prefetch(run, done)
        return True

    def _end_prefetch(self, run: _Running, done: int) -> None:
        """Put the ``done`` pages the read brought into L2 and release what it held (SGLang
        ``_handle_prefetch_result``, ``unified_radix_cache.py:2422-2534``)."""
        pf, sim, pt = run.prefetch, self.sim, self.sim.cfg.page_tokens
        run.prefetch = None
        self.prefetch_tokens -= pf.requested_tokens
        self.cache.tree.host_unlock(pf.anchor)
        self.cache.l2.free(pf.pages, pf.swa_pages)  # the reservation: insert_host takes what it keeps
        if pf.t_end > pf.t_start:
            sim.rec.transfer(self.idx, "l3_read", pf.t_start, pf.t_end, pf.nbytes * done // pf.pages)
        window = done == pf.pages and pf.swa_pages > 0
        pages = self.cache.insert_host(run.req.keys, pf.start + done, window=window) if done else 0
        run.prefetched_pages = min(done, pages)
        sim.rec.counters["prefetched_tokens_total"] += done * pt
        if done < pf.pages:  # cut short: by the timeout's deadline, or at once under best_effort
            reason = "deadline" if sim.cfg.prefetch_policy == "timeout" else "storage_transfer"
            sim.rec.counters[f"storage_prefetch_unfulfilled_tokens_total:{reason}"] += (pf.pages - done) * pt

    def _retry_prefetches(self) -> None:
        """Once per scheduling pass, re-issue the L3 lookups that are due (SGLang
        ``StoragePrefetchRetries.pop_ready``, ``mem_cache/storage_prefetch.py:43-83``, called from
        ``scheduler.py:3393-3404, 3879-3891``): a lookup that missed is due 8 passes after the first pass
        that sees it, at most 8 re-issues per request, and never for the queue head, which is admitted
        with what it has."""
        self.passes += 1
        retries = self.retries
        if not (self.waiting and retries):
            return
        retries.pop(self.waiting[0].req.rid, None)
        step = self.passes
        if not any(due is None or due <= step for due in retries.values()):
            return
        ready = []
        for run in self.waiting:
            rid = run.req.rid
            if rid not in retries:
                continue
            if run.prefetch_attempts >= PREFETCH_RETRY_MAX_ATTEMPTS:
                del retries[rid]
                continue
            due = retries[rid]
            if due is None:
                retries[rid] = due = step + PREFETCH_RETRY_INTERVAL
            if due > step:
                continue
            del retries[rid]
            ready.append(run)
        for run in ready:
            run.prefetch_attempts += 1
            self.sim.rec.counters["sim_prefetch_retries_total"] += 1
            self._start_prefetch(run)


def _storage_pages(op: BackupOp | Backup, windowed: bool) -> tuple[list, bool, int]:
    """What a backup writes to storage: its page keys, whether it carries window state, its window pages
    (``windowed``: the cache has a window pool)."""
    keys = [k for n in op.storage_nodes for k in n.key]
    return (keys, any(n.host_swa for n in op.nodes), op.swa_pages) if windowed else (keys, False, 0)


class Simulation:
    """Builds the SimPy environment, instances and the arrival process; :meth:`run` plays it out."""

    def __init__(self, cfg: EngineConfig, costs: CostTable, roofline: Roofline, rng: np.random.Generator) -> None:
        self.cfg, self.costs, self.roofline, self.rng = cfg, costs, roofline, rng
        self.env = simpy.Environment()
        self.rec = Recorder(record_requests=cfg.record_requests)
        needs_window = cfg.model.has_swa
        self.storage = Storage(cfg.l3_capacity_pages, needs_window) if cfg.l3_enabled else None
        self.instances = [Instance(self, i) for i in range(cfg.instances)]
        dp = cfg.dp_size
        self.controllers: list[_DPController] = []
        if dp > 1:  # ranks [s x dp, (s + 1) x dp) are server s's, stepping together
            for s in range(0, cfg.instances, dp):
                share = 0.0 if backend_prices(roofline, "dp_attention") else cfg.dp_mlp_share
                group, ranks = _DPGroup(self.env, roofline, share), self.instances[s : s + dp]
                for inst in ranks:  # one tokenizer manager per server, ahead of its DP controller
                    inst.group, inst.tokenizers = group, ranks[0].tokenizers
                self.controllers.append(_DPController(cfg.load_balance_method, ranks))
        self._rr = 0
        self.arrived = 0
        self.on_finish: Callable[[Request], None] | None = None
        self.progress = None
        self.client = None  # a client with a report of its own (sim.serve.lanes.LanePlayer)
        self.end_s = 0.0
        # Pools that hold bytes, with their anchor: a copy moves kv-anchored pages and window pages.
        self._pool_items = [(p.name, p.anchor) for p in cfg.model.pools if p.bytes_per_page]

    def transfer_seconds(self, op: str, kv_pages: int, swa_pages: int, cache: PrefixCache) -> float:
        """One merged copy of ``kv_pages`` pages (and window pages) in every pool, one call per pool."""
        backend, total = self.cfg.io_backend, 0.0
        layers = self.cfg.model.layers if self.cfg.host_layout == "layer_first" else 1
        for name, anchor in self._pool_items:
            pages = kv_pages if anchor == "kv" else swa_pages
            if pages:
                item = cache.page_bytes[name]
                total += self.costs.transfer_seconds(op, backend, pages * layers, max(1, item // layers))
        return total

    # ----- routing and arrivals ---------------------------------------------------------------
    def route(self, req: Request) -> Instance:
        insts = self.instances
        if len(insts) == 1:
            return insts[0]
        if self.cfg.router == "cache_aware":
            pt = self.cfg.page_tokens
            best = max(range(len(insts)), key=lambda i: (insts[i].cache.tree.peek(req.keys, (req.input_len - 1) // pt)[1],
                                                         -insts[i].load, -i))  # fmt: skip
            return insts[best]
        if self.controllers:  # a server in turn, then its DP controller's pick
            ctl = self.controllers[self._rr % len(self.controllers)]
            self._rr += 1
            return ctl.pick(req, self.env.now)
        inst = insts[self._rr % len(insts)]
        self._rr += 1
        return inst

    def dispatch(self, req: Request) -> None:
        self.arrived += 1
        if req.input_len >= self.cfg.l1_pages * self.cfg.page_tokens - 6:
            # SGLang refuses a prompt the KV pool cannot hold before queueing it: max_req_input_len is
            # min(context_len, pool tokens) - 6 (managers/tp_worker.py:568-572, managers/utils.py:259-290).
            self.rec.dropped["exceeds_kv_capacity"] += 1
            self.finished_one(req)
            return
        inst = self.route(req)
        inst.tokenize(_Running(req, inst.idx))

    def trace_arrivals(self, requests: list[Request]):
        env = self.env
        for req in requests:
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.dispatch(req)

    def record(self, run: _Running, now: float) -> None:
        """A finished request's record (``sim.serve.metrics.REQUEST_COLUMNS``): admitted and hit at its first
        admission, first token as the client saw it, retractions and their re-prefills apart."""
        req = run.req
        device, host, storage = run.hits
        self.rec.request((
            req.rid, run.inst, req.session, req.round, req.arrival_s, run.admitted_s, run.first_token_s, now,
            req.input_len, req.output_len, device, host, storage, req.input_len - device - host - storage,
            run.load_s, run.admitted_s - req.arrival_s, run.first_token_s - req.arrival_s, now - req.arrival_s,
            run.retractions, run.reprocessed_computed, run.reprocessed_cached,
        ))  # fmt: skip
        self.finished_one(req)

    def finished_one(self, req: Request) -> None:
        """A request left the system (finished or dropped): the closed loop may send the next round."""
        self.end_s = max(self.end_s, self.env.now)
        if self.progress is not None:
            self.progress.update(1)
        if self.on_finish is not None:
            self.on_finish(req)

    def sampler(self):
        env, interval = self.env, self.cfg.sample_interval_s
        while True:
            yield env.timeout(interval)
            for inst in self.instances:
                c, w = inst.cache, inst.cache.window
                l1_swa, l2_swa = (w.l1_used, w.l2_used) if w else (0, 0)
                row = {
                    "time_s": env.now, "instance": inst.idx, "waiting": len(inst.waiting),
                    "running": len(inst.prefilling) + len(inst.decoding),
                    "l1_kv_pages": c.l1.kv_used, "l1_swa_pages": l1_swa,
                    "l2_kv_pages": c.l2.kv_used, "l2_swa_pages": l2_swa,
                    "pending_backups": len(c.pending), "evictable_tokens": c.tree.evictable_tokens,
                }  # fmt: skip
                for name, nbytes in c.pool_bytes(c.l1.kv_used, l1_swa).items():
                    row[f"l1_bytes_{name}"] = nbytes
                for name, nbytes in c.pool_bytes(c.l2.kv_used, l2_swa).items():
                    row[f"l2_bytes_{name}"] = nbytes
                if self.storage is not None:  # shared by the instances: the same count on each row
                    row["l3_pages"] = len(self.storage)
                self.rec.samples.append(row)

    def run(self, arrivals, progress=None) -> None:
        """Play the arrival process out; stop at ``duration_s`` if set, else when all work is done. ``progress``
        (a bar's ``update``) counts the requests that leave the system."""
        env, self.progress = self.env, progress
        done = env.process(arrivals)
        for inst in self.instances:
            env.process(inst.run())
        env.process(self.sampler())
        if self.cfg.duration_s is not None:
            env.run(until=self.cfg.duration_s)
            return
        env.run(until=done)
        cutoff = self.client.cutoff_s if self.client is not None else math.inf  # a client may stop waiting
        while env.now < cutoff and any(i.load or i.cache.pending or i.acked or i.to_flush for i in self.instances):
            env.run(until=min(env.now + self.cfg.sample_interval_s, cutoff))
        self.end_s = max(self.end_s, max((lk.free_at for i in self.instances for lk in i.links.values()), default=0))
        if env.now >= cutoff:  # the client stopped waiting: the run lasted until then
            self.end_s = env.now
