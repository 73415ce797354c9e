"""What a run's instances share, below the engine that wires them: the configuration, the SimPy clock, the
recorder, the shared L3 store, the page ages, the copies' prices, and where a request that leaves goes.

The scheduler's parts (:mod:`sim.serve.scheduler`) hold this, and :class:`~sim.serve.engine.Simulation`
extends it with the instances, the router and the arrival process: the parts never import the engine above
them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from sim.cache.ages import TierAges
from sim.cache.protocol import PrefixCache
from sim.model.compute import Roofline
from sim.model.costs import CostTable
from sim.serve.config import EngineConfig
from sim.serve.metrics import Recorder
from sim.serve.scheduler.req import Running
from sim.serve.storage import Storage
from sim.workload.request import Request

__all__ = ["RunState"]


class RunState:
    """A run's configuration, clock, recorder, L3 store and page ages, shared by its instances."""

    def __init__(self, cfg: EngineConfig, costs: CostTable, roofline: Roofline, rng: np.random.Generator) -> None:
        self.cfg, self.costs, self.roofline, self.rng = cfg, costs, roofline, rng
        self.env = simpy.Environment()
        self.rec = Recorder(record_requests=cfg.record_requests)
        needs_window = cfg.model.has_swa
        self.storage = Storage(cfg.l3_capacity_pages, needs_window) if cfg.l3_enabled else None
        self.ages = TierAges(self.env)  # page ages at hits and evictions per tier (sim.cache.ages)
        if self.storage is not None:
            self.storage.record_ages(self.ages, cfg.page_tokens)
        self.on_finish: Callable[[Request], None] | None = None
        self.progress: Any = None  # a progress bar, counting the requests that leave
        self.on_tick: Callable[[float], None] | None = None  # at each sampler tick (a bar on the simulated clock)
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
