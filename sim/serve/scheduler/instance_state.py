"""What one instance's scheduler parts share, below them: the run, the cache the instance serves with, its
waiting queue and prefilling requests, and its wake-up. :class:`~sim.serve.scheduler.instance.Instance`
extends it with the parts and the event loop; each part holds this (and the parts below it, or a callback
into the instance, where it needs them), so no part imports the instance above it.
"""

from __future__ import annotations

import itertools
from collections import deque

from sim.cache.hicache import HiCache
from sim.cache.protocol import PrefixCache
from sim.cache.v4.hicache import V4HiCache, check_v4_setup
from sim.serve.config import EngineConfig
from sim.serve.scheduler.req import Running
from sim.serve.state import RunState

__all__ = ["InstanceState", "new_cache"]


def new_cache(cfg: EngineConfig) -> PrefixCache:
    """SGLang's V4 cache for a model with a sliding window (exact, :mod:`sim.cache.v4.swacache`), else HiCache."""
    if cfg.model.has_swa:
        check_v4_setup(cfg.model, page_tokens=cfg.page_tokens, write_policy=cfg.write_policy,
                       eviction_policy=cfg.eviction_policy)  # fmt: skip
        return V4HiCache(cfg.model, l1_pages=cfg.l1_pages, l2_pages=cfg.l2_pages, l2_swa_pages=cfg.l2_swa_pages,
                         policy=cfg.write_policy, load_back_threshold=cfg.load_back_threshold, page_tokens=cfg.page_tokens,
                         swa_full_tokens_ratio=cfg.swa_full_tokens_ratio,
                         chunked_prefill_size=cfg.chunked_prefill_size,
                         decode_lookahead=cfg.spec.reserve if cfg.spec else 0)  # fmt: skip
    return HiCache(cfg.model, l1_pages=cfg.l1_pages, l2_pages=cfg.l2_pages, policy=cfg.write_policy,
                   load_back_threshold=cfg.load_back_threshold, page_tokens=cfg.page_tokens,
                   eviction_policy=cfg.eviction_policy, eviction_config=cfg.eviction_config,
                   chunked_prefill_size=cfg.chunked_prefill_size,
                   decode_lookahead=cfg.spec.reserve if cfg.spec else 0)  # fmt: skip


class InstanceState:
    """One instance's (with DP attention: one rank's) cache, waiting queue and prefilling requests."""

    def __init__(self, sim: RunState, idx: int) -> None:
        self.sim, self.idx, self.env = sim, idx, sim.env
        self.spec = sim.cfg.spec
        self.cache = self._own_cache()
        self.waiting: deque[Running] = deque()
        self.queue_seq = itertools.count()  # numbers the waiting queue's order (Running.queue_seq)
        self.prefilling: list[Running] = []
        self.queued_tokens = 0  # the waiting and prefilling requests' prompts (the DP controller's total_tokens)
        self.wake = self.env.event()

    def _own_cache(self) -> PrefixCache:
        """A new cache to serve with, recording its pages' ages in the run's (:mod:`sim.cache.ages`)."""
        cache = new_cache(self.sim.cfg)
        cache.record_ages(self.sim.ages)
        return cache

    def flush_cache(self) -> None:
        """SGLang's ``/flush_cache`` on a quiescent instance: L1 and L2 emptied, counters kept, L3 untouched."""
        stats = self.cache.stats
        self.cache = self._own_cache()
        self.cache.stats = stats

    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()
