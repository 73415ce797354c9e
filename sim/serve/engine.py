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
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim.base.collector import cycle_gc_paused
from sim.model.compute import Roofline
from sim.model.costs import CostTable
from sim.model.speculative import backend_prices
from sim.serve.cacheaware import CacheAwareRouter
from sim.serve.config import EngineConfig
from sim.serve.hashring import HashRing, dp_aware_urls, routing_key
from sim.serve.scheduler.dp import DPController, DPGroup
from sim.serve.scheduler.instance import Instance
from sim.serve.scheduler.prefill_delayer import attach_delayers
from sim.serve.scheduler.req import Running
from sim.serve.state import RunState
from sim.workload.request import Request

if TYPE_CHECKING:
    from sim.serve.lanes import LanePlayer

__all__ = ["Simulation"]


class Simulation(RunState):
    """Builds the instances and the arrival process over a run's shared state (the SimPy environment, the
    recorder, the L3 store: :class:`~sim.serve.state.RunState`); :meth:`run` plays it out."""

    def __init__(self, cfg: EngineConfig, costs: CostTable, roofline: Roofline, rng: np.random.Generator) -> None:
        super().__init__(cfg, costs, roofline, rng)
        self.instances = [Instance(self, i) for i in range(cfg.instances)]
        dp = cfg.dp_size
        self.controllers: list[DPController] = []
        if dp > 1:  # ranks [s x dp, (s + 1) x dp) are server s's, stepping together
            for s in range(0, cfg.instances, dp):
                share = 0.0 if backend_prices(roofline, "dp_attention") else cfg.dp_mlp_share
                group = DPGroup(self.env, roofline, share, cfg.prefill_decode_interval, cfg.prefill_decode_interval_min_bs)
                ranks = self.instances[s : s + dp]
                for inst in ranks:  # one tokenizer manager per server, ahead of its DP controller
                    inst.group, inst.tokenizers = group, ranks[0].tokenizers
                self.controllers.append(DPController(cfg.load_balance_method, ranks))
        if cfg.enable_prefill_delayer:
            attach_delayers(self.env, self.instances, dp, cfg.prefill_delayer_max_delay_passes,
                            cfg.prefill_delayer_token_usage_low_watermark)  # fmt: skip
        self.ring: HashRing | None = None  # cluster.router consistent_hashing: every rank is a worker
        if cfg.router == "consistent_hashing":
            self.ring = HashRing(dp_aware_urls(cfg.instances // dp, dp))
        self.cache_aware: CacheAwareRouter | None = None  # cluster.router cache_aware: every rank is a worker
        self.routed: dict[int, int] = {}  # the cache-aware router's requests in flight: id -> worker
        if cfg.router == "cache_aware":
            self.cache_aware = CacheAwareRouter(cfg.cache_aware, cfg.instances, cfg.page_tokens)
        self._rr = 0
        self.arrived = 0
        self.client: LanePlayer | None = None  # a client with a report of its own

    # ----- routing and arrivals ---------------------------------------------------------------
    def route(self, req: Request) -> Instance:
        insts = self.instances
        if len(insts) == 1:
            return insts[0]
        if self.ring is not None:
            return insts[self.ring.pick(routing_key(req.session, req.rid))]
        if self.cache_aware is not None:
            w = self.routed[req.rid] = self.cache_aware.pick(req.keys, req.input_len, self.env.now)
            return insts[w]
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

    def finished_one(self, req: Request) -> None:
        if self.cache_aware is not None:  # its response closed: one less in flight on its worker
            w = self.routed.pop(req.rid, None)
            if w is not None:
                self.cache_aware.done(w)
        super().finished_one(req)

    def trace_arrivals(self, requests: Iterable[Request]) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for req in requests:
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.dispatch(req)

    def sampler(self) -> Generator[simpy.Event, Any, None]:
        env, interval = self.env, self.cfg.sample_interval_s
        while True:
            yield env.timeout(interval)
            if self.on_tick is not None:
                self.on_tick(env.now)
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
