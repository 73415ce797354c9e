"""The timed model: SimPy processes that turn residency decisions into TTFT, throughput and queueing.

One arrival process feeds requests to instances through a router. Each instance runs one scheduler process
(:class:`~sim.serve.scheduler.instance.Instance`): continuous batching in passes, chunked prefill within a token
budget, decode for every running request, the write path, L3 prefetch and retraction, in the collaborators of
:mod:`sim.serve.scheduler` named after SGLang's parts. Pass time comes from the scenario's step-time backend
(the roofline of :mod:`sim.model.compute`, or measured kernels, :mod:`sim.model.aic`); copies are timed from
the cost table (:mod:`sim.model.costs`) on FIFO links (H2D, D2H, and the L3 read and write links). A link is a
one-server FIFO queue computed in closed form (a copy starts at max(now, when the link frees)) whose
completions are SimPy timeouts: the timeline of a capacity-1 ``simpy.Resource`` with one process per copy, at
one event per copy instead of four, and with the end known when the copy is queued, which the load-back
overlap needs.

A text prompt reaches the scheduler after SGLang's tokenizer manager has encoded it, one prompt after another
per tokenizer process (``managers/tokenizer_manager.py:1058-1066``; ``tokenizer_tokens_per_s``, set by
``scenario from-sglang`` when the client sends text): requests sent together arrive one encode apart, and the
first pass of a burst may start with the first prompt alone. The rest of SGLang's path outside the passes (ZMQ
hops, the scheduler's busy poll, detokenizing one token, the HTTP stream) is not charged: microseconds to a
millisecond a request (``docs/notes/request_path.md``).

With DP attention each rank is an ``Instance`` with its own cache; the ranks of a server step together
(:class:`~sim.serve.scheduler.dp.DPGroup`) and its DP controller places requests on them
(:class:`~sim.serve.scheduler.dp.DPController`).

Same-time ordering: SimPy breaks ties FIFO by scheduling order; the arrival process is started before the
scheduler processes, so an arrival at a step boundary is seen by that boundary's admission.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim.base.collector import cycle_gc_paused
from sim.cache.ages import TierAges
from sim.cache.protocol import PrefixCache
from sim.model.compute import Roofline
from sim.model.costs import CostTable
from sim.model.pools import ModelSpec
from sim.model.speculative import SpecDecode, backend_prices
from sim.serve.hashring import HashRing, dp_aware_urls, routing_key
from sim.serve.metrics import Recorder
from sim.serve.scheduler.dp import DPController, DPGroup
from sim.serve.scheduler.instance import Instance
from sim.serve.scheduler.prefill_delayer import attach_delayers
from sim.serve.scheduler.req import Running
from sim.serve.storage import Storage
from sim.workload.request import Request

if TYPE_CHECKING:
    from sim.serve.lanes import LanePlayer

__all__ = ["EngineConfig", "Simulation"]


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs, decoupled from the YAML schema (see ``sim.app.run.build``)."""

    model: ModelSpec
    instances: int = 1
    router: str = "round_robin"
    l1_pages: int = 1000
    l2_pages: int = 0  # 0: HiCache off (L1 only)
    l2_swa_pages: int | None = None  # V4's SWA host pages (None: l2_pages' SWA share)
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
    enable_prefill_delayer: bool = False  # --enable-prefill-delayer (sim.serve.scheduler.prefill_delayer)
    prefill_delayer_max_delay_passes: int = 30  # --prefill-delayer-max-delay-passes
    prefill_delayer_token_usage_low_watermark: float | None = None  # --prefill-delayer-token-usage-low-watermark
    tbo_threshold: float | None = None  # two-batch overlap's split threshold (sim.model.tbo); None: TBO off


class Simulation:
    """Builds the SimPy environment, instances and the arrival process; :meth:`run` plays it out."""

    def __init__(self, cfg: EngineConfig, costs: CostTable, roofline: Roofline, rng: np.random.Generator) -> None:
        self.cfg, self.costs, self.roofline, self.rng = cfg, costs, roofline, rng
        self.env = simpy.Environment()
        self.rec = Recorder(record_requests=cfg.record_requests)
        needs_window = cfg.model.has_swa
        self.storage = Storage(cfg.l3_capacity_pages, needs_window) if cfg.l3_enabled else None
        self.ages = TierAges(self.env)  # page ages at hits and evictions per tier (sim.cache.ages)
        if self.storage is not None:
            self.storage.record_ages(self.ages, cfg.page_tokens)
        self.instances = [Instance(self, i) for i in range(cfg.instances)]
        dp = cfg.dp_size
        self.controllers: list[DPController] = []
        if dp > 1:  # ranks [s x dp, (s + 1) x dp) are server s's, stepping together
            for s in range(0, cfg.instances, dp):
                share = 0.0 if backend_prices(roofline, "dp_attention") else cfg.dp_mlp_share
                group, ranks = DPGroup(self.env, roofline, share), self.instances[s : s + dp]
                for inst in ranks:  # one tokenizer manager per server, ahead of its DP controller
                    inst.group, inst.tokenizers = group, ranks[0].tokenizers
                self.controllers.append(DPController(cfg.load_balance_method, ranks))
        if cfg.enable_prefill_delayer:
            attach_delayers(self.env, self.instances, dp, cfg.prefill_delayer_max_delay_passes,
                            cfg.prefill_delayer_token_usage_low_watermark)  # fmt: skip
        self.ring: HashRing | None = None  # cluster.router consistent_hashing: every rank is a worker
        if cfg.router == "consistent_hashing":
            self.ring = HashRing(dp_aware_urls(cfg.instances // dp, dp))
        self._rr = 0
        self.arrived = 0
        self.on_finish: Callable[[Request], None] | None = None
        self.progress: Any = None  # a progress bar, counting the requests that leave
        self.client: LanePlayer | None = None  # a client with a report of its own
        self.end_s = 0.0
        # Pools that hold bytes, with their anchor: a copy moves kv-anchored pages and window pages.
        self._pool_items = [(p.name, p.anchor) for p in cfg.model.pools if p.bytes_per_page]
        self._transfer_memo: dict[tuple[str, int, int], float] = {}

    def transfer_seconds(self, op: str, kv_pages: int, swa_pages: int, cache: PrefixCache) -> float:
        """One merged copy of ``kv_pages`` pages (and window pages) in every pool, one call per pool; memoised
        (every cache of a run has the configuration's page bytes)."""
        key = (op, kv_pages, swa_pages)
        seconds = self._transfer_memo.get(key)
        if seconds is None:
            seconds = self._transfer_memo[key] = self._transfer_seconds(op, kv_pages, swa_pages, cache)
        return seconds

    def _transfer_seconds(self, op: str, kv_pages: int, swa_pages: int, cache: PrefixCache) -> float:
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
        if self.ring is not None:
            return insts[self.ring.pick(routing_key(req.session, req.rid))]
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
        inst.tokenize(Running(req, inst.idx))

    def trace_arrivals(self, requests: Iterable[Request]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for req in requests:
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.dispatch(req)

    def record(self, run: Running, now: float) -> None:
        """A finished request's record (``sim.serve.metrics.REQUEST_COLUMNS``): admitted and hit at its first
        admission, first token as the client saw it, retractions and their re-prefills apart."""
        req = run.req
        assert run.hits is not None  # set at its first admission
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

    def sampler(self) -> Generator[simpy.Event, Any, None]:
        env, interval = self.env, self.cfg.sample_interval_s
        while True:
            yield env.timeout(interval)
            if not self.rec.samples.wants_tick():  # a thinned tick: no row built
                continue
            for inst in self.instances:
                c, w = inst.cache, inst.cache.window
                l1_swa, l2_swa = (w.l1_used, w.l2_used) if w else (0, 0)
                row = {
                    "time_s": env.now, "instance": inst.idx, "waiting": len(inst.waiting),
                    "running": len(inst.prefilling) + len(inst.running_batch.decoding),
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

    def run(self, arrivals: Generator[simpy.Event, Any, None], progress: Any = None) -> None:
        """Play the arrival process out; stop at ``duration_s`` if set, else when all work is done. ``progress``
        (a bar's ``update``) counts the requests that leave the system."""
        with cycle_gc_paused():
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
            while env.now < cutoff and not all(i.quiescent for i in self.instances):
                env.run(until=min(env.now + self.cfg.sample_interval_s, cutoff))
            self.end_s = max(self.end_s, max((lk.free_at for i in self.instances for lk in i.links.values()), default=0))
            if env.now >= cutoff:  # the client stopped waiting: the run lasted until then
                self.end_s = env.now
