"""The ``hardware`` and ``cluster`` sections: the GPU and host one instance runs on, its parallel layout, and the
instances that share one L3."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.model.hardware import NODE_DRAM_GB, SGLANG_DEFAULTS
from sim.model.pinning import PinCeiling, platform_ceiling
from sim.scenario.schema.section import MAX_INSTANCES, _field_error, _resolve_file, _Section

# Catalog GPUs SGLang runs --enable-deepseek-v4-fp4-indexer on (arg_groups/serving_hook.py:464-470): SM100 (B200,
# B300, GB200, GB300), SM120 (RTX PRO 6000) and gfx950 (MI355X).
FP4_INDEXER_GPUS = ("B200", "B300", "GB200", "GB300", "RTX PRO 6000", "MI355X")
HIP_GPUS = ("MI300X", "MI325X", "MI355X")  # ROCm: SGLang sizes the fp4 indexer pool at its fp4 bytes (pool_configurator.py:1109-1114)


class HardwareConfig(_Section):
    """The GPU and host an instance runs on.

    With ``gpu`` naming a catalog entry (``sim/data/hardware.json``), the GPU memory, HBM bandwidth and peak
    FLOPs come from its datasheet; with a model ``config`` too, ``kv_mem_gb`` follows as SGLang sizes it
    (``sim.model.hardware``): ``mem_fraction_static`` (or SGLang's default rule) of the memory minus the weights per
    rank. Fields given explicitly win.
    """

    gpu: str | None = Field(None, description="Catalog GPU: H20, H100, H800, H200, B200, B300, GB200, GB300, A10, "
                            "RTX PRO 6000, MI300X, MI325X, MI355X.")
    mem_fraction_static: float | None = Field(
        None, gt=0, lt=1, description="SGLang --mem-fraction-static; null = SGLang's default rule for the GPU."
    )
    sglang_defaults: Literal[SGLANG_DEFAULTS] = Field(
        "0.5.23",
        description="Whose default rules fill mem_fraction_static and scheduler.chunked_prefill_size when they "
        "are not given: SGLang 0.5.23 (modelled) or 0.5.2 (older published runs); nothing else changes.",
    )
    gpu_name: str = Field("H200", description="Label for reports.")
    gpu_mem_gb: float = Field(141.0, gt=0, description="GPU memory in GB (1e9 B). The default is H200 SXM's datasheet 141; "
                            "hardware.gpu fills the memory CUDA reports instead (H200: 143,771 MiB = 150.755 GB).")
    kv_mem_gb: float = Field(
        40.0,
        gt=0,
        description="GPU memory given to the KV pools (L1), GB; what is left after weights and activations.",
    )
    max_total_num_tokens: int | None = Field(
        None, ge=1,
        description="The Full KV pool's tokens per scheduler, as the server's startup log states it (SGLang prints "
        "max_total_num_tokens=N, managers/scheduler.py:1268-1276): replaces the pool derived from kv_mem_gb. "
        "`scenario from-sglang --server-log` fills it.",
    )
    swa_max_total_num_tokens: int | None = Field(
        None, ge=1,
        description="DeepSeek V4's SWA pool tokens per scheduler as logged (DSV4 pool sizes: swa=N, "
        "pool_configurator.py:1605-1611): replaces hicache.swa_full_tokens_ratio's share; needs max_total_num_tokens.",
    )
    max_total_tokens: int | None = Field(
        None, ge=1,
        description="SGLang --max-total-tokens: caps the Full pool at this many tokens (the derived pool if smaller, "
        "kv_cache_configurator.py:3096-3105).",
    )
    host_mem_gb: float = Field(
        NODE_DRAM_GB, gt=0,
        description="Host DRAM available to one instance's L2 pools (all ranks), GB: what SGLang reads as available at "
        "start; its pools must fit it less SGLang's 10 GiB reserve. Default: sim.model.hardware.NODE_DRAM_GB.",
    )
    pinnable_gb: float | None = Field(
        None, gt=0,
        description="Host memory the platform lets this instance's ranks pin, GB (all ranks): its pinned host pools "
        "must fit it. null = the platform's rule (sim.model.pinning): none beyond host_mem_gb on CUDA, half of "
        "host_mem_gb on ROCm (amdgpu's default GTT size; the node's /sys/class/drm/card0/device/mem_info_gtt_total).",
    )
    tp_size: int = Field(
        1, ge=1, description="Tensor-parallel ranks per instance; V4 pools are replicated on every rank."
    )
    dp_size: int = Field(
        1, ge=1, le=64,
        description="SGLang --dp-size: with enable_dp_attention, the attention data-parallel ranks inside the TP group "
        "(one scheduler, KV pool, radix tree and host pool each; attention sharded over tp_size / dp_size GPUs, MoE "
        "over all tp_size). Without it, independent replicas: use cluster.instances.",
    )
    enable_dp_attention: bool = Field(
        False, description="SGLang --enable-dp-attention (turns dp_size into attention-DP ranks, parallel_hook.py:39-61)."
    )
    ep_size: int = Field(
        1, ge=1,
        description="SGLang --ep-size (MoE expert parallelism); must divide tp_size. Experts are split tp_size ways "
        "either way, so per-GPU weight bytes do not change.",
    )
    moe_a2a_backend: str = Field(
        "none",
        description="SGLang --moe-a2a-backend (none, deepep, megamoe, ...): what it keeps resident before the KV pool "
        "is sized (DeepSeek's shared experts whole on every rank; MegaMoE's expert scale copies and fused shared "
        "expert, sim.model.moeweights) leaves kv_mem_gb smaller; its kernels' speed is the step-time backend's.",
    )
    cost_table: str | None = Field(
        None,
        description="Cost-table JSON from `calibrate`, relative to the scenario file; null = bundled spec-derived default.",
    )
    hbm_bandwidth_tbps: float = Field(4.8, gt=0, description="HBM bandwidth, TB/s (H200: 4.8).")
    peak_tflops: float = Field(989.0, gt=0, description="Peak dense BF16 TFLOP/s (H200 SXM: 989).")

    @field_validator("cost_table")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)

    @property
    def platform(self) -> str:
        """cuda, or rocm for a ROCm catalog GPU (``HIP_GPUS``)."""
        return "rocm" if (self.gpu or "").upper() in HIP_GPUS else "cuda"

    @property
    def pin_ceiling(self) -> PinCeiling:
        """The pinnable ceiling of this instance's host pools: ``pinnable_gb``, else the platform's rule."""
        if self.pinnable_gb is not None:
            return PinCeiling(self.pinnable_gb, "hardware.pinnable_gb")
        return platform_ceiling(self.platform, self.host_mem_gb, "hardware.host_mem_gb")

    @property
    def attn_dp_size(self) -> int:
        """Attention-DP ranks per instance: dp_size with DP attention, else 1."""
        return self.dp_size if self.enable_dp_attention else 1

    @model_validator(mode="after")
    def _parallel(self) -> HardwareConfig:
        if self.dp_size > 1 and not self.enable_dp_attention:
            raise _field_error("dp_size", "dp_size > 1 without enable_dp_attention is SGLang's replica DP: "
                               "set cluster.instances instead (or enable_dp_attention: true)")  # fmt: skip
        if self.tp_size % self.attn_dp_size:
            raise _field_error("dp_size", f"{self.dp_size} does not divide tp_size {self.tp_size} "
                               "(SGLang asserts it, parallel_hook.py:326)")  # fmt: skip
        if self.swa_max_total_num_tokens is not None and self.max_total_num_tokens is None:
            raise _field_error("swa_max_total_num_tokens", "needs hardware.max_total_num_tokens (the Full pool beside it)")
        if self.tp_size % self.ep_size:
            raise _field_error("ep_size", f"{self.ep_size} does not divide tp_size {self.tp_size}")
        return self

    @model_validator(mode="after")
    def _kv_fits(self) -> HardwareConfig:
        if self.kv_mem_gb > self.gpu_mem_gb:
            raise _field_error(
                "kv_mem_gb",
                f"KV memory larger than the GPU ({self.kv_mem_gb:g} > gpu_mem_gb {self.gpu_mem_gb:g})",
            )
        return self


class ClusterConfig(_Section):
    """Instances sharing one L3; L1/L2 stay private to each instance."""

    instances: int = Field(1, ge=1, le=MAX_INSTANCES, description="Inference servers (TP groups).")
    router: Literal["round_robin", "cache_aware", "consistent_hashing"] = Field(
        "round_robin",
        description="How requests pick an instance. consistent_hashing: sglang_router --policy consistent_hashing "
        "--dp-aware keyed by the session (aiperf's correlation id), as AgentX runs it: every attention-DP rank is a "
        "worker on a hash ring and a session's calls stay on one rank, bypassing scheduler.load_balance_method "
        "(sim/serve/hashring.py). cache_aware: sglang_router --policy cache_aware --dp-aware, every attention-DP "
        "rank a worker: the router's own tree of the text it sent where and its count of requests in flight, "
        "with the router_* options below (sim/serve/cacheaware.py).",
    )
    router_cache_threshold: float = Field(
        0.3, ge=0, le=1, description="sglang_router --cache-threshold (cache_aware): above this share of the "
        "prompt matched in the router's tree, the worker holding the match takes it; else the least loaded.",
    )
    router_balance_abs_threshold: int = Field(
        64, ge=0, description="sglang_router --balance-abs-threshold (cache_aware): load (requests in flight) is "
        "imbalanced, and the least loaded worker takes the request, when max - min exceeds this...",
    )
    router_balance_rel_threshold: float = Field(
        1.5, ge=0, description="sglang_router --balance-rel-threshold (cache_aware): ...and max exceeds min times this.",
    )
    router_eviction_interval_s: int = Field(
        60, ge=0, description="sglang_router --eviction-interval-secs (cache_aware): seconds between trims of each "
        "worker's share of the router's tree to router_max_tree_size; 0 never trims.",
    )
    router_max_tree_size: int = Field(
        2**26, ge=1, description="sglang_router --max-tree-size (cache_aware): what each worker's share of the "
        "router's tree is trimmed to, least recently used first; characters to the router, tokens here.",
    )
    role: Literal["colocated", "decode"] = Field(
        "colocated", description="colocated prefill+decode, or a PD decode instance (HiSparse)."
    )
