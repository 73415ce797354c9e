"""The engine's configuration: every setting a run's instances and their scheduler parts read, decoupled from
the scenario YAML (:mod:`sim.scenario.resolve` builds it). It sits below the parts that read it and the engine
that wires them (:mod:`sim.serve.engine`), so each of them reads one way.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.pools import ModelSpec
from sim.model.speculative import SpecDecode
from sim.serve.cacheaware import CacheAwareOptions

__all__ = ["EngineConfig"]


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs, decoupled from the YAML schema (see ``sim.app.run.build``)."""

    model: ModelSpec
    instances: int = 1
    router: str = "round_robin"
    cache_aware: CacheAwareOptions = CacheAwareOptions()  # router "cache_aware": sglang_router's flags
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
