"""The single-pool HiCache's counters and the names SGLang exports them under.

:class:`CacheStats` holds raw counts; :func:`hicache_metrics` names them as SGLang's Prometheus metrics do
(``observability/metrics_collector.py``). DeepSeek V4's cache has its own, :func:`sim.cache.v4.hicache.v4_metrics`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from sim.cache.tiers import WritePolicy

if TYPE_CHECKING:
    from sim.cache.tiers import Tier

__all__ = ["DEVICE_FULL", "HOST_PRESSURE", "UNBACKED", "CacheStats", "MetricSource", "hicache_metrics"]

UNBACKED = "write_through_unbacked_eviction"
HOST_PRESSURE = "host_pressure"
DEVICE_FULL = "device_full"


@dataclass
class CacheStats:
    """Raw counters; :func:`hicache_metrics` names them as SGLang's Prometheus metrics do."""

    requests: int = 0
    input_tokens: int = 0
    input_pages: int = 0
    cached_tokens: Counter = field(default_factory=Counter)  # by cache_source: device, host
    cached_pages: Counter = field(default_factory=Counter)
    computed_tokens: int = 0
    evictions: int = 0
    evicted_tokens: int = 0
    demotions: int = 0
    host_evictions: int = 0
    host_evicted_tokens: int = 0
    dropped_tokens: Counter = field(default_factory=Counter)  # by reason
    backup_kv_pages: int = 0
    load_kv_pages: int = 0
    load_back_skipped_tokens: int = 0
    backup_failed_tokens: int = 0
    host_alloc_failures: int = 0  # host reservations that could not be met, as SGLang's policy simulator counts
    dedup_evictions: int = 0  # boundary: host copies of device pages given up for L2 room

    def hit_rate(self, sources: Sequence[str] = ("device",), *, by: str = "tokens") -> float:
        """Share of input tokens (or whole input pages) served from the given cache sources."""
        counts, total = (self.cached_pages, self.input_pages) if by == "pages" else (
            self.cached_tokens, self.input_tokens)  # fmt: skip
        return sum(counts[s] for s in sources) / total if total else 0.0


class MetricSource(Protocol):
    """What :func:`hicache_metrics` reads of its cache, :class:`sim.cache.hicache.HiCache`."""

    stats: CacheStats
    page_tokens: int
    policy: WritePolicy
    l2_enabled: bool
    l2: Tier

    def pool_bytes(self, kv_pages: int, swa_pages: int = 0) -> dict[str, int]: ...


def hicache_metrics(cache: MetricSource) -> dict:
    """Counters under SGLang's metric names (``sglang:`` prefix dropped) and label sets
    (``observability/metrics_collector.py``): a labelled counter is a dict keyed by its label values,
    nested in label order. Token counters carry the ``pool`` label of the pool that owns the slot
    indices, ``kv``; sidecars ride on its indices and only the bytes counters, all pools combined,
    include them (``hybrid_cache_controller.py:953-1000``). Counters SGLang does not export start
    with ``sim_``."""
    s, pt = cache.stats, cache.page_tokens
    backup = cache.pool_bytes(s.backup_kv_pages)
    load = cache.pool_bytes(s.load_kv_pages)

    # SGLang pre-seeds host_pressure, and write_through_unbacked_eviction under write_through only, once
    # HiCache is on (unified_radix_cache.py:565-574); the pool label is always kv.
    reasons = [HOST_PRESSURE, UNBACKED] if cache.policy is WritePolicy.WRITE_THROUGH else [HOST_PRESSURE]
    dropped = {r: {"kv": s.dropped_tokens[r]} for r in reasons} if cache.l2_enabled else {}
    return {
        "cached_tokens_total": {"device": s.cached_tokens["device"], "host": s.cached_tokens["host"]},
        "evicted_tokens_total": s.evicted_tokens,
        "hicache_dropped_tokens_total": dropped,
        "hicache_backup_tokens_total": {"kv": s.backup_kv_pages * pt},
        "hicache_backup_bytes_total": sum(backup.values()),
        "load_back_tokens_total": {"kv": s.load_kv_pages * pt},
        "load_back_bytes_total": sum(load.values()),
        "hicache_host_used_tokens": cache.l2.kv_used * pt,
        "hicache_host_total_tokens": None if cache.l2.kv_cap == math.inf else cache.l2.kv_cap * pt,
        "sim_computed_tokens_total": s.computed_tokens,
        "sim_device_full_tokens_total": s.dropped_tokens[DEVICE_FULL],
        "sim_hicache_backup_bytes_by_pool": backup,
        "sim_load_back_bytes_by_pool": load,
    }  # fmt: skip
