"""The ``hicache`` and ``l3`` sections: the host tier (sizing, write policy, thresholds, L3 prefetch termination)
and the storage tier under it, as the cache controller reads them (:mod:`sim.cache`, :mod:`sim.serve.storage`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sim.scenario.schema.section import _field_error, _Section


class HiCacheConfig(_Section):
    """L2 (host) HiCache: sizing, write policy, thresholds and L3 prefetch termination (DESIGN.md 1.4-1.5).

    As SGLang does (arg_groups/hicache_hook.py:171-193), ``page_first_direct`` + ``kernel`` becomes io
    ``direct`` and ``page_first`` + ``direct`` becomes layout ``page_first_direct``.
    """

    enabled: bool = Field(True, description="Hierarchical cache on (L2 host pools); false = L1 only.")
    page_size: int = Field(256, ge=1, description="Tokens per radix page (DeepSeek V4 asserts 256).")
    hicache_ratio: float = Field(2.0, gt=0, description="Host pages = int(device pages x ratio), per pool.")
    host_pages: int | None = Field(
        None, ge=1, description="Explicit host pages per pool, overriding hicache_ratio."
    )
    host_swa_pages: int | None = Field(
        None, ge=1,
        description="DeepSeek V4: explicit host pages of the SWA-anchored pools (swa and the state rings), as the "
        "server's log states them (memory_pool_host.py:341-350); null: int(SWA device pages x hicache_ratio) with "
        "hicache_ratio, else the SWA share of host_pages.",
    )
    write_policy: Literal["write_through", "write_through_selective", "write_back", "boundary"] = Field(
        "write_through",
        description="When L1 pages are backed up to L2: on insert (hit >= 1), on second hit (>= 2), at eviction, "
        "or boundary (SGLang's policy-simulator boundary_l1_l2: whole path at once, duplicates dropped first).",
    )
    radix_eviction_policy: Literal["lru", "lfu", "slru", "fifo", "filo", "mru"] = Field(
        "lru", description="Device victim order, as SGLang's --radix-eviction-policy (slru: protected at 2 hits)."
    )
    radix_eviction_policy_config: dict[str, int] | None = Field(
        None, description="Parameters of the eviction policy, as SGLang's --radix-eviction-policy-config: "
        "slru takes protected_threshold (default 2)."
    )
    load_back_threshold: int = Field(
        10, ge=0, description="Minimum host-hit tokens to load back L2 -> L1 rather than recompute."
    )
    prefetch_threshold: int = Field(256, ge=0, description="Minimum storage-hit tokens to prefetch from L3.")
    prefetch_policy: Literal["best_effort", "wait_complete", "timeout"] = Field(
        "timeout",
        description="When an L3 prefetch stops: as soon as the request can run, when all arrives, or at a timeout.",
    )
    prefetch_timeout_base_s: float = Field(1.0, ge=0, description="Prefetch timeout: fixed part, seconds.")
    prefetch_timeout_per_ki_token_s: float = Field(
        0.25, ge=0, description="Prefetch timeout: seconds per 1024 tokens."
    )
    io_backend: Literal["kernel", "direct", "batched"] = Field(
        "kernel", description="L1<->L2 copy mechanism; cost-table backend kernel, copy_engine or batched."
    )
    mem_layout: Literal["page_first", "layer_first", "page_first_direct"] = Field(
        "page_first", description="Host pool layout (affects copy granularity)."
    )
    swa_full_tokens_ratio: float | Literal["cap"] = Field(
        0.1,
        description="DeepSeek V4's device SWA pool as a fraction of full tokens (SGLang's default 0.1), or 'cap': "
        "SGLang's cap mode, which it uses when --max-running-requests is given without --swa-full-tokens-ratio "
        "(the pool sized from scheduler.max_running_requests, the Full pool gets the rest).",
    )

    @field_validator("swa_full_tokens_ratio", mode="before")
    @classmethod
    def _swa_ratio(cls, value: Any) -> Any:
        if value == "cap" or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1):
            return float(value) if value != "cap" else value
        raise _field_error("", f"a share in (0, 1] or cap, got {value!r}")  # the field's own path

    @model_validator(mode="before")
    @classmethod
    def _resolve_io(cls, data: Any) -> Any:
        if isinstance(data, dict):
            io, layout = data.get("io_backend", "kernel"), data.get("mem_layout", "page_first")
            if layout == "page_first_direct" and io == "kernel":
                data = {**data, "io_backend": "direct"}
            elif layout == "page_first" and io == "direct":
                data = {**data, "mem_layout": "page_first_direct"}
        return data

    @model_validator(mode="after")
    def _eviction_config(self) -> HiCacheConfig:
        from sim.base.errors import InputError
        from sim.cache.eviction import eviction_order

        try:
            eviction_order(self.radix_eviction_policy, self.radix_eviction_policy_config)
        except InputError as exc:
            raise _field_error("radix_eviction_policy_config", str(exc).split(": ", 1)[1]) from None
        return self

    @property
    def write_through_threshold(self) -> int:
        """Hit count at which a node is backed up: 1 for write_through, 2 otherwise (unified_radix_cache.py:558)."""
        return 1 if self.write_policy == "write_through" else 2

    @property
    def cost_backend(self) -> str:
        """The cost-table backend name for ``io_backend``."""
        return {"kernel": "kernel", "direct": "copy_engine", "batched": "batched"}[self.io_backend]

    def prefetch_timeout_s(self, tokens: int) -> float:
        """SGLang's prefetch timeout for a prefetch of ``tokens`` tokens."""
        return self.prefetch_timeout_base_s + self.prefetch_timeout_per_ki_token_s * tokens / 1024


class L3Config(_Section):
    """L3 storage shared by all instances; defaults are the measured EIC figures for V4-Flash (TP8 H20)."""

    enabled: bool = Field(False, description="L3 storage on (needs hicache.enabled).")
    read_gbps: float = Field(0.57, gt=0, description="Read bandwidth per rank, GB/s (measured EIC).")
    write_gbps: float = Field(
        0.16, gt=0, description="Write bandwidth per rank, GB/s (measured EIC; only TP0 writes)."
    )
    latency_ms: float = Field(
        1.0,
        ge=0,
        description="Latency of one storage call (a lookup, or a read or write of up to io_batch_pages), ms "
        "(estimate). Lookups run one at a time, and one that misses holds its request until it ends.",
    )
    capacity_gb: float | None = Field(None, gt=0, description="Storage capacity, GB; null = unbounded.")
    io_batch_pages: int = Field(128, ge=1, description="Pages per storage call (hicache_storage.py:24).")
    window_pages: Literal["trailing", "all"] = Field(
        "trailing",
        description="Window (SWA) pages an L3 read or write moves: the trailing window (SGLang 0.5.23's "
        "TRAILING_PAGES pools) or every page (whole 9,158,208-B V4-Flash pages, as the EIC patch of "
        "measurements.md M1 moves them: its 0.57 / 0.16 GB/s per rank are whole-page rates).",
    )
