"""The scenario schema: pydantic models of every section, their defaults and cross-field checks.

Pydantic lives only here and in :mod:`sim.app.scenario`, at the YAML edge. Every model forbids unknown keys and
is frozen, so a typo fails loudly and the engine cannot mutate its config. Defaults are SGLang 0.5.23's (see
``shared/reference/sglang_hicache.md``); estimates say so in their help text. Relative paths
(``hardware.cost_table``, ``workload.path``, ``hisparse.access.trace_path``) are resolved against the
scenario file's directory, then the current directory, and stored absolute, so a resolved dump loads back
anywhere.
"""

from __future__ import annotations

import difflib
import operator
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from sim.base.inputs import MAX_REQUEST_TOKENS, number_problem, numbers_problem
from sim.model.hardware import SGLANG_DEFAULTS

__all__ = [
    "CATALOG_MODELS",
    "AgenticWorkload",
    "BenchServingWorkload",
    "ClusterConfig",
    "ComputeConfig",
    "HardwareConfig",
    "HiCacheConfig",
    "HiSparseAccessConfig",
    "HiSparseConfig",
    "LanesWorkload",
    "L3Config",
    "ModelConfig",
    "MultiTurnWorkload",
    "OutputConfig",
    "PoolConfig",
    "Scenario",
    "SchedulerConfig",
    "ServingStep",
    "SpeculativeConfig",
    "SyntheticWorkload",
    "TraceWorkload",
    "build_model_spec",
]

CATALOG_MODELS: tuple[str, ...] = ("deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash", "generic")

# Limits that keep every accepted scenario within memory and time on one machine. Each is well above
# what the shipped scenarios use (largest: 470K workload pages, 220K tokens per request).
MAX_REQUESTS = 1_000_000  # requests a workload generates
MAX_WORKLOAD_PAGES = 5_000_000  # page keys a synthetic or multi-turn workload holds (~100 B each)
MAX_INSTANCES = 1024
# Catalog GPUs SGLang runs --enable-deepseek-v4-fp4-indexer on: SM100 (B200, B300) and gfx950 (MI355X).
FP4_INDEXER_GPUS = ("B200", "B300", "MI355X")
HIP_GPUS = ("MI300X", "MI355X")  # ROCm: SGLang sizes the fp4 indexer pool at its fp4 bytes (pool_configurator.py:1109-1114)
MAX_HISPARSE_IDS = 200_000_000  # top-k ids HiSparse simulates (sample requests x layers x steps x top-k)
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class _Section(BaseModel):
    """Base of every schema model: strict types, no unknown keys, immutable once validated, and every number
    within the bounds any input has (:func:`sim.base.inputs.number_problem`), whatever field holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _bounded_numbers(cls, data: Any) -> Any:
        """A rule, not a list: it walks the raw values, so a field added later is covered with no change here.
        Runs before any field's own checks, so a cross-field check never computes with an unbounded number."""
        found = _number_problem_in(cls, data) if isinstance(data, dict) else None
        if found is not None:
            raise _field_error(*found)
        return data


_BOUND_OPS = (("ge", operator.ge), ("gt", operator.gt), ("le", operator.le), ("lt", operator.lt))


def _declared_refuses(info: FieldInfo, value: Any) -> bool:
    """Whether the field's own bounds (``ge``, ``lt``...) refuse ``value``: their message says it better."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return any((bound := getattr(m, attr, None)) is not None and not op(value, bound)
                   for m in info.metadata for attr, op in _BOUND_OPS)  # fmt: skip
    except TypeError:
        return False


def _holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(arg) for arg in typing.get_args(annotation))


def _number_problem_in(cls: type[BaseModel], data: dict) -> tuple[str, str] | None:
    """(field path, problem) of the first number of ``cls``'s own fields in ``data`` that is out of bounds;
    a section below checks its own, an unknown key is refused as such."""
    for key, value in data.items():
        info = cls.model_fields.get(key) if isinstance(key, str) else None
        if info is None or (_holds_model(info.annotation) and isinstance(value, dict | list)):
            continue
        if not _declared_refuses(info, value) and (found := numbers_problem(value, key)) is not None:
            return found
    return None


def _numbers_ok(cls: type[BaseModel], data: Any) -> bool:
    """Whether every number of ``cls``'s own fields in ``data`` passes both its own and the global bounds."""
    if not isinstance(data, dict):
        return True
    return _number_problem_in(cls, data) is None and not any(
        _declared_refuses(cls.model_fields[k], v) for k, v in data.items() if k in cls.model_fields)


def _field_error(path: str, message: str) -> PydanticCustomError:
    """A validation error pointing at ``path`` (dotted, relative to the model raising it)."""
    return PydanticCustomError("scenario_field", "{path}: {message}", {"path": path, "message": message})


def _named_config(name: Any) -> str | None:
    """A model name that is a Hugging Face id with a shipped config (``deepseek-ai/DeepSeek-V4-Pro``)."""
    if not isinstance(name, str) or "/" not in name:
        return None
    from sim.model.aic import model_config_path

    return name if model_config_path(name) is not None else None


def _resolve_file(value: str | None, info: ValidationInfo) -> str | None:
    """Find ``value`` beside the scenario file, else under the CWD; return it absolute.

    Raises a validation error when it exists in neither place (unless the context turns checks off).
    """
    if value is None:
        return None
    ctx = info.context or {}
    path = Path(value).expanduser()
    candidates = (
        [path] if path.is_absolute() else [Path(ctx["base_dir"]) / path] if ctx.get("base_dir") else []
    )
    if not path.is_absolute():
        candidates.append(Path.cwd() / path)
    for cand in candidates:
        if cand.exists():
            return str(cand.resolve())
    if not ctx.get("check_files", True):
        return value
    where = " or ".join(str(c.parent) for c in candidates)
    raise PydanticCustomError(
        "file_not_found", "file not found: {value} (looked in {where})", {"value": value, "where": where}
    )


# --------------------------------------------------------------------------------------------------- model


class PoolConfig(_Section):
    """One KV pool of an inline model: its size per page, and how HiCache treats it (DESIGN.md 1.1).

    Give either ``bytes_per_page`` or a layer structure, as ``sim.model.pools.LayerGroup`` reads it: ``layers``
    with ``bytes_per_slot`` (and ``compress_ratio``, ``align``: per-layer page bytes padded as SGLang pads to
    576 B, pool_configurator.py:1372-1404), or ``layers`` with ``ring_rows`` x ``row_bytes`` (a state ring).
    """

    name: str = Field(description="Pool name, e.g. kv, swa, c4, c4_indexer, c4_state.")
    bytes_per_page: int | None = Field(
        None, ge=0, description="Bytes one page of this pool holds per rank (0 for the kv anchor)."
    )
    layers: int | None = Field(None, ge=0, description="Layer structure: layers owning this pool.")
    bytes_per_slot: int | None = Field(
        None, ge=1, description="Layer structure: bytes per slot per layer (584 for a v4 KV row)."
    )
    compress_ratio: int = Field(1, ge=1, description="Layer structure: raw tokens per slot (4 for C4, 128 for C128).")
    align: int = Field(1, ge=1, description="Layer structure: per-layer page bytes round up to this (576 for v4).")
    ring_rows: int | None = Field(None, ge=1, description="State ring: rows per page per layer (C4: 8).")
    row_bytes: int | None = Field(None, ge=1, description="State ring: bytes per row (fp32 C4 state: 8,192).")
    anchor: Literal["kv", "swa"] | None = Field(
        None,
        description="Pool whose indices this sidecar reuses; null for the anchors themselves (kv, swa).",
    )
    hit_policy: Literal["ALL_PAGES", "TRAILING_PAGES"] = Field(
        "ALL_PAGES",
        description="L3 hit rule; defaults to TRAILING_PAGES exactly when anchored on swa, as upstream.",
    )
    backupable: bool = Field(True, description="False for pools HiCache cannot back up (forced recompute).")
    rank_replicated: bool = Field(
        True, description="Every TP rank holds a full copy (true for all V4 pools)."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_hit_policy(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("hit_policy") is None:
            anchor = data.get("anchor") or data.get("name")
            data = {**data, "hit_policy": "TRAILING_PAGES" if anchor == "swa" else "ALL_PAGES"}
        return data

    @model_validator(mode="after")
    def _one_size(self) -> PoolConfig:
        ring = self.ring_rows is not None or self.row_bytes is not None
        structured = self.layers is not None or self.bytes_per_slot is not None or ring
        if (self.bytes_per_page is None) == (not structured):
            raise _field_error(
                "bytes_per_page", "give either bytes_per_page or a layer structure (layers + ...), not both or neither"
            )
        if structured and self.layers is None:
            raise _field_error("layers", "a layer structure needs layers")
        if structured and ring and (self.ring_rows is None or self.row_bytes is None):
            raise _field_error("ring_rows", "a state ring needs both ring_rows and row_bytes")
        if structured and not ring and self.bytes_per_slot is None:
            raise _field_error("bytes_per_slot", "a layer structure needs bytes_per_slot (or ring_rows + row_bytes)")
        if self.anchor is None and self.name not in ("kv", "swa"):
            raise _field_error("anchor", f"pool {self.name!r} needs an anchor (kv or swa)")
        return self

    def page_bytes(self, page_size: int) -> int:
        """Bytes per page per rank at ``page_size`` tokens."""
        from sim.model.pools import LayerGroup

        if self.bytes_per_page is not None:
            return self.bytes_per_page
        group = LayerGroup(self.layers or 0, self.compress_ratio, self.bytes_per_slot or 0, self.align,
                           self.ring_rows or 0, self.row_bytes or 0)  # fmt: skip
        return group.page_bytes(page_size)


class ModelConfig(_Section):
    """The model whose KV is cached: a catalog name, an inline list of pools, a Hugging Face config.json, or a
    Hugging Face id whose config aiconfigurator-core ships (read as that config.json).

    A bare string in YAML (``model: deepseek-v4-flash``) means ``{name: ...}``. With ``config``, the KV bytes
    per rank (at ``hardware.tp_size``), the layers, and the compute model's inputs follow from the config
    (:mod:`sim.model.modelcfg`); DeepSeek V4 configs map to the catalog's pools.
    """

    name: str = Field(description=f"Catalog name ({', '.join(CATALOG_MODELS)}), a Hugging Face id whose config "
                      "aiconfigurator-core ships (deepseek-ai/DeepSeek-V4-Pro; the aic extra), or, with pools or "
                      "config, any label.")
    config: str | None = Field(
        None,
        description="Hugging Face config.json (a path, relative to the scenario file, or a bundled name: qwen3-14b, "
        "llama-3.1-8b, deepseek-v3, deepseek-v4-flash).",
    )
    kv_dtype: str = Field("auto", description="KV cache dtype as SGLang's --kv-cache-dtype (auto: the model's).")
    page_size: int | None = Field(
        None,
        ge=1,
        description="Tokens per page the pool sizes refer to; must equal hicache.page_size if set.",
    )
    generic_bytes_per_token: int | None = Field(
        None,
        ge=1,
        description="KV bytes per token per rank of the generic single-pool model (MLA fp8 V3: 35,136).",
    )
    pools: list[PoolConfig] | None = Field(
        None, min_length=1, description="Inline pool list; null to use the catalog entry."
    )
    sliding_window: int = Field(0, ge=0, description="Inline model: SWA window tokens (V4: 128); 0 = none.")
    index_topk: int | None = Field(None, ge=1, description="Inline model: the indexer's top-k (HiSparse).")
    layers: int = Field(1, ge=1, description="Inline model: transformer layers (load-back overlaps per layer).")
    expert_dtype: Literal["auto", "bf16", "fp8", "fp4"] = Field(
        "auto",
        description="Routed-expert weights (with a config): auto = the checkpoint's (fp4 when its quantization_config "
        "says routed_experts_quant_method mxfp4, configs/model_config.py:722-733), or bf16, fp8, fp4 (MXFP4: "
        "e2m1 pairs and one scale per 32 weights, layers/quantization/fp8.py:1603-1716); also the quantization "
        "compute.backend: aiconfigurator prices the MoE kernels at.",
    )
    fp4_indexer: bool = Field(
        False,
        description="SGLang's --enable-deepseek-v4-fp4-indexer: C4 indexer keys stored as fp4 (68 B per compressed "
        "token instead of 132, mem_cache/deepseek_v4_memory_pool.py:53-57); SM100/SM120 only.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("config")
    @classmethod
    def _resolve_config(cls, value: str | None, info: ValidationInfo) -> str | None:
        from sim.model.modelcfg import is_named

        if value is None or is_named(value):
            return value
        return _resolve_file(value, info)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.config is not None:
            from sim.model.modelcfg import KV_DTYPE_BYTES

            if self.pools is not None or self.generic_bytes_per_token is not None:
                raise _field_error("config", "give a config.json or pools / generic_bytes_per_token, not both")
            if self.kv_dtype not in KV_DTYPE_BYTES:
                raise _field_error("kv_dtype", f"expected one of {', '.join(KV_DTYPE_BYTES)}, got {self.kv_dtype!r}")
            return self
        if self.expert_dtype != "auto":
            raise _field_error("expert_dtype", "needs model.config: the weights (and so the KV memory they leave) "
                               "come from a config.json")  # fmt: skip
        if self.pools is None:
            if self.name not in CATALOG_MODELS:
                close = difflib.get_close_matches(self.name, CATALOG_MODELS, n=1)
                hint = (
                    f" (did you mean {close[0]}?)"
                    if close
                    else "; a Hugging Face id names a config aiconfigurator-core ships (pip install "
                    "'hicache-sim[aic]'), else give model.config: path/to/config.json"
                    if "/" in self.name
                    else f"; expected one of {', '.join(CATALOG_MODELS)}"
                )
                raise _field_error("name", f"unknown model {self.name!r}{hint}")
            if self.name == "generic" and self.generic_bytes_per_token is None:
                raise _field_error("generic_bytes_per_token", "required for the generic model")
            if self.name != "generic" and self.generic_bytes_per_token is not None:
                raise _field_error("generic_bytes_per_token", "applies only to the generic model")
            return self
        if self.generic_bytes_per_token is not None:
            raise _field_error(
                "generic_bytes_per_token", "applies only to the generic catalog model, not to inline pools"
            )
        names = [p.name for p in self.pools]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise _field_error("pools", f"pool {dup!r} listed twice")
        for i, pool in enumerate(self.pools):
            if pool.anchor is not None and pool.anchor not in names:
                raise _field_error(
                    f"pools.{i}.anchor", f"anchor pool {pool.anchor!r} is not in the pool list"
                )
        return self

    def shape(self, tp_size: int = 1, attn_dp_size: int = 1) -> Any:
        """The :class:`sim.model.modelcfg.ModelShape` of ``config`` at ``tp_size`` (None without a config)."""
        from sim.model.modelcfg import derive, load_config

        if self.config is None:
            return None
        cfg, _ = load_config(self.config)
        return derive(cfg, tp_size=tp_size, kv_dtype=self.kv_dtype, name=self.name, expert_dtype=self.expert_dtype,
                      fp4_indexer=self.fp4_indexer, attn_dp_size=attn_dp_size)  # fmt: skip

    def page_bytes(self, page_size: int, tp_size: int = 1, attn_dp_size: int = 1) -> int:
        """Total bytes per page per rank over all pools."""
        from sim.model import pools

        if self.config is not None:
            from sim.model.modelcfg import model_spec

            return model_spec(self.shape(tp_size, attn_dp_size), page_size).bytes_per_page
        if self.pools is not None:
            return sum(p.page_bytes(page_size) for p in self.pools)
        return pools.get_model(self.name, page_size=page_size, bytes_per_token=self.generic_bytes_per_token).bytes_per_page


# ------------------------------------------------------------------------------------------------ hardware


class HardwareConfig(_Section):
    """The GPU and host an instance runs on.

    With ``gpu`` naming a catalog entry (``sim/data/hardware.json``), the GPU memory, HBM bandwidth and peak
    FLOPs come from its datasheet; with a model ``config`` too, ``kv_mem_gb`` follows as SGLang sizes it
    (``sim.model.hardware``): ``mem_fraction_static`` (or SGLang's default rule) of the memory minus the weights per
    rank. Fields given explicitly win.
    """

    gpu: str | None = Field(None, description="Catalog GPU: H20, H100, H800, H200, B200, B300, A10, MI300X, MI355X.")
    mem_fraction_static: float | None = Field(
        None, gt=0, lt=1, description="SGLang --mem-fraction-static; null = SGLang's default rule for the GPU."
    )
    sglang_defaults: Literal[SGLANG_DEFAULTS] = Field(
        "0.5.23",
        description="Whose default rules fill mem_fraction_static and scheduler.chunked_prefill_size when they "
        "are not given: SGLang 0.5.23 (modelled) or 0.5.2 (older published runs); nothing else changes.",
    )
    gpu_name: str = Field("H200", description="Label for reports.")
    gpu_mem_gb: float = Field(141.0, gt=0, description="GPU memory in GB (1e9 B); H200 SXM: 141.")
    kv_mem_gb: float = Field(
        40.0,
        gt=0,
        description="GPU memory given to the KV pools (L1), GB; what is left after weights and activations.",
    )
    host_mem_gb: float = Field(
        1024.0, gt=0, description="Host DRAM budget for the L2 pools of one instance (all ranks), GB."
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


# ------------------------------------------------------------------------------------------------- hicache


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


class SchedulerConfig(_Section):
    """Batch formation per scheduler step."""

    max_running_requests: int = Field(256, ge=1, description="Requests decoding at once.")
    chunked_prefill_size: int = Field(
        8192, ge=1, description="Prefill tokens per step; longer prompts are chunked."
    )
    max_prefill_tokens: int = Field(
        16384, ge=1, description="Prefill token budget for admitting new requests in one step."
    )
    schedule_policy: Literal["fcfs", "lpm"] = Field(
        "fcfs", description="Waiting-queue order: arrival, or longest prefix match."
    )
    enable_mixed_chunk: bool = Field(
        False,
        description="SGLang's --enable-mixed-chunk: running requests decode inside each prefill pass. Off (SGLang's "
        "default): a pass is a prefill batch whenever one forms, else a decode batch.",
    )
    load_balance_method: Literal["auto", "round_robin", "total_requests", "total_tokens", "follow_bootstrap_room"] = Field(
        "auto",
        description="SGLang --load-balance-method: how the DP controller places a request on an attention-DP rank "
        "(managers/data_parallel_controller.py:105-145, 880-925); auto (SGLang's default) is round_robin outside PD "
        "prefill (serving_hook.py:217-236). follow_bootstrap_room: bootstrap room modulo ranks (PD prefill).",
    )
    overlap_schedule: bool = Field(
        True,
        description="SGLang's overlap scheduler (on by default; --disable-overlap-schedule turns it off): a pass's "
        "results are processed once the next pass is launched. With HiCache on, the first tokens of a prefill pass "
        "then reach the client when the next prefill pass ends.",
    )
    disable_consecutive_prefill_overlap: bool = Field(
        False,
        description="SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP=1: no overlap between two prefill passes, so a prefill "
        "pass's first tokens stream at its own end even with HiCache on (managers/scheduler.py:2136-2156).",
    )
    prefill_decode_interval: int = Field(
        0,
        ge=0,
        description="SGLang's --prefill-decode-interval: decode passes run after a prefill pass before the next prefill "
        "(0: off, SGLang's default outside profiled Qwen3-VL setups).",
    )
    prefill_decode_interval_min_bs: int = Field(
        0, ge=0, description="--prefill-decode-interval-min-bs: the interval applies only from this many running requests."
    )
    tokenizer_tokens_per_s: float | None = Field(
        None,
        gt=0,
        description="Tokens per second SGLang's tokenizer manager encodes a text prompt at, one request after another "
        "before the scheduler sees it (tokenizer_manager.py:1058-1066); null: prompts arrive as token ids (nothing "
        "charged). `scenario from-sglang` sets it when the client sends text (bench/tokenizer.py measures it).",
    )
    tokenizer_workers: int = Field(
        1,
        ge=1,
        description="SGLang's --tokenizer-worker-num: tokenizer processes encoding prompts in parallel, per instance "
        "(a prompt goes to the first free one: optimistic next to the OS spreading connections over them).",
    )


class ComputeConfig(_Section):
    """GPU step time: a simple roofline (defaults are V4-Flash estimates, not measurements), or with
    ``backend: aiconfigurator`` aiconfigurator-core's measured SGLang kernels (:mod:`sim.model.aic`).

    prefill time = tokens x (flops_per_token + attn x context) / (peak x mfu); decode time = (weights + KV read)
    / (HBM x mbu); plus ``step_overhead_ms`` per step. The efficiencies left null come from the cost table's
    ``compute`` section (``hicache-sim calibrate compute``), else from spec-derived estimates.
    """

    backend: Literal["roofline", "aiconfigurator"] = Field(
        "roofline",
        description="What prices each pass: the roofline fields below, or aiconfigurator-core's measured SGLang "
        "kernels for hardware.gpu (H100, H200, B200, B300), the model, hardware.tp_size and model.expert_dtype "
        "(the aic extra: pip install 'hicache-sim[aic]'); what its database lacks is refused.",
    )
    prefill_flops_per_token: float = Field(
        2.6e10,
        gt=0,
        description="Linear FLOPs per token: 2 x active params (V4-Flash ~13B active; estimate).",
    )
    attn_flops_per_token_per_ctx: float = Field(
        1.4e6,
        ge=0,
        description="Attention FLOPs per token per context token (estimate: 4 x 64 heads x 512 dim x 43 layers / 4 for C4 compression).",
    )
    decode_bytes_per_step: float = Field(
        1.3e10, gt=0, description="Weight bytes read per decode step: active params x 1 B (fp8)."
    )
    kv_bytes_per_token_read: float = Field(
        3900.0,
        ge=0,
        description="KV bytes read per context token per decode step (V4-Flash FULL-anchored ~3,899 B; estimate).",
    )
    kv_bytes_per_request: float = Field(
        0.0, ge=0, description="KV bytes read per request per decode step whatever its length (V4: SWA window, top-k rows)."
    )
    expert_bytes: float = Field(0.0, ge=0, description="MoE: bytes of one routed expert over all layers, per rank.")
    n_experts: int = Field(0, ge=0, description="MoE: routed experts per layer (0: dense model).")
    experts_per_token: int = Field(0, ge=0, description="MoE: routed experts each token picks.")
    mfu: float | None = Field(
        None, ge=0.01, le=1,
        description="Achieved fraction of peak FLOPs in prefill; null = the cost table's fitted value, else 0.4 (estimate).",
    )
    mbu: float | None = Field(
        None, ge=0.01, le=1,
        description="Achieved fraction of HBM bandwidth in decode; null = fitted, else 0.7 (estimate).",
    )
    step_overhead_ms: float | None = Field(
        None, ge=0, description="Scheduler and launch overhead per step, ms; null = fitted, else 2.0 (estimate); "
        "with backend aiconfigurator null = 0 (its kernel sums, the overlap scheduler hiding the CPU).",
    )
    attn_flops_scale: float | None = Field(
        None, gt=0, description="Multiplier on attention FLOPs per context token; null = fitted, else 1."
    )


# ------------------------------------------------------------------------------------------------ workload


class MultiTurnWorkload(_Section):
    """SGLang's bench_multiturn: clients each send rounds of history + a new question (reference section 8).

    Field names are the client's options (``--num-clients`` is ``num_clients``). The sender follows the
    client's loop (``benchmark/hicache/bench_multiturn.py``): while fewer than ``max_parallel`` are in flight
    it pops a ready request (``ready_queue_policy``) and then sleeps one inter-arrival gap, whether or not one
    was ready; at the limit it polls every 50 ms.
    """

    kind: Literal["multi_turn"] = Field("multi_turn", description="Workload type.")
    num_clients: int = Field(256, ge=1, le=MAX_REQUESTS, description="Conversations.")
    max_parallel: int = Field(128, ge=1, description="Requests in flight at once.")
    request_length: int = Field(512, ge=1, le=MAX_REQUEST_TOKENS, description="New tokens per round (the sub-question).")
    output_length: int = Field(64, ge=1, le=MAX_REQUEST_TOKENS, description="Generated tokens per round.")
    num_rounds: int = Field(5, ge=1, le=MAX_REQUESTS, description="Rounds per client.")
    request_rate: float | None = Field(
        1.0,
        gt=0,
        description="Request arrivals per second (bench default 1.0); null = closed loop, as fast as max_parallel allows.",
    )
    distribution: Literal["poisson", "uniform"] = Field(
        "poisson", description="Inter-arrival distribution (uniform over [0, 2/rate])."
    )
    system_prompt_length: int = Field(
        0, ge=0, le=MAX_REQUEST_TOKENS, description="Tokens of a system prompt shared by all clients."
    )
    ready_queue_policy: Literal["random", "fifo"] = Field(
        "random", description="Which ready client is sent next: a random one (bench default) or the oldest."
    )
    round_barrier: bool = Field(
        False, description="Round r+1 of any client waits until every client has finished round r."
    )
    sub_question_input_length: int = Field(
        0, ge=0, le=MAX_REQUEST_TOKENS, description="Tokens of each later round's new question; 0 = request_length (bench default)."
    )
    disable_random_sample: bool = Field(
        False,
        description="Random token ids instead of ShareGPT text; prompts are distinct either way, so no effect on the cache.",
    )
    round_barrier_pause_s: float = Field(
        0.0,
        ge=0,
        description="With round_barrier, the client's pause before releasing the next round (the upstream client "
        "sends a heartbeat and sleeps 10 s; `scenario from-sglang` sets 10).",
    )
    min_rounds: int = Field(0, ge=0, le=MAX_REQUESTS, description="--min-rounds: 0 = num_rounds (or max_rounds).")
    max_rounds: int = Field(
        0, ge=0, le=MAX_REQUESTS,
        description="--max-rounds: each client runs a uniform number of rounds in [min_rounds, max_rounds]; 0 = num_rounds.",
    )  # fmt: skip
    range_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="--range-ratio: each new question's and answer's length is uniform over [length x ratio, length] "
        "(1: fixed lengths).",
    )

    def round_range(self) -> tuple[int, int]:
        """(min, max) rounds per client, resolved as the client resolves them."""
        lo, hi = self.min_rounds, self.max_rounds
        if not lo and not hi:
            return self.num_rounds, self.num_rounds
        return lo or hi, hi or lo

    def client_rounds(self, rng) -> list[int]:
        """Each client's number of rounds, drawn from ``rng`` only when they differ (``random.randint``)."""
        lo, hi = self.round_range()
        if lo == hi:
            return [lo] * self.num_clients
        return [int(x) for x in rng.integers(lo, hi + 1, self.num_clients)]

    @model_validator(mode="after")
    def _bounded(self) -> MultiTurnWorkload:
        lo, hi = self.round_range()
        if lo > hi:
            raise _field_error("min_rounds", f"min_rounds ({lo}) must be <= max_rounds ({hi})")
        question = max(self.request_length, self.sub_question_input_length)
        last = self.system_prompt_length + hi * (question + self.output_length)
        if last > MAX_REQUEST_TOKENS:
            raise _field_error("num_rounds", f"the last round reaches {last:,} tokens, over the limit of "
                               f"{MAX_REQUEST_TOKENS:,} per request")  # fmt: skip
        if self.num_clients * hi > MAX_REQUESTS:
            rounds = "num_rounds" if (self.min_rounds, self.max_rounds) == (0, 0) else "max_rounds"
            raise _field_error("num_clients", f"num_clients x {rounds} = {self.num_clients * hi:,} "
                               f"requests, over the limit of {MAX_REQUESTS:,}")  # fmt: skip
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds (at most): each round's input and final keys."""
        question = max(self.request_length, self.sub_question_input_length)
        step, rounds = question + self.output_length, self.round_range()[1]
        tokens = rounds * (2 * self.system_prompt_length + question) + step * rounds * rounds
        return self.num_clients * tokens // page_size



class ServingStep(_Section):
    """One ``bench_serving`` invocation: ``--num-prompts`` random-ids prompts sent under a concurrency limit."""

    num_prompts: int = Field(1000, ge=1, le=MAX_REQUESTS, description="--num-prompts.")
    random_input_len: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="--random-input-len (tokens).")
    random_output_len: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="--random-output-len (tokens).")
    random_range_ratio: float = Field(
        0.0, ge=0, le=1, description="--random-range-ratio: lengths uniform in [len x ratio, len]; 1 = exact."
    )
    max_concurrency: int | None = Field(None, ge=1, description="--max-concurrency; null = unlimited.")
    request_rate: float | None = Field(
        None, gt=0, description="--request-rate, req/s (Poisson); null = inf, every prompt at once."
    )
    flush_cache: bool = Field(False, description="POST /flush_cache before the step (L1 and L2 emptied, L3 kept).")
    seed: int = Field(42, ge=0, description="--seed (default 42): steps with equal seed and lengths send the same prompts.")
    wait_backups: bool = Field(
        False, description="Start only after every queued L2/L3 backup has landed (a pause between runs)."
    )
    label: str = Field("", description="Name of the step in reports.")


class BenchServingWorkload(_Section):
    """SGLang's ``bench_serving --dataset-name random-ids``: one or more steps run back to back."""

    kind: Literal["bench_serving"] = Field("bench_serving", description="Workload type.")
    dataset_name: Literal["random-ids", "random"] = Field(
        "random-ids", description="--dataset-name; both give distinct prompts (no shared prefixes)."
    )
    steps: list[ServingStep] = Field(min_length=1, description="The bench_serving runs, in order.")

    @model_validator(mode="after")
    def _bounded(self) -> BenchServingWorkload:
        prompts = sum(st.num_prompts for st in self.steps)
        if prompts > MAX_REQUESTS:
            raise _field_error("steps", f"{prompts:,} prompts in all, over the limit of {MAX_REQUESTS:,}")
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds (at most: lengths are drawn up to random_input_len)."""
        return sum(st.num_prompts * (st.random_input_len // page_size) for st in self.steps)


class SyntheticWorkload(_Section):
    """Independent requests with optional shared prefixes, for controlled experiments."""

    kind: Literal["synthetic"] = Field("synthetic", description="Workload type.")
    arrival: Literal["poisson", "gamma"] = Field("poisson", description="Inter-arrival process.")
    rate: float = Field(1.0, gt=0, description="Mean arrivals per second.")
    cv: float = Field(
        1.0, gt=0, description="Coefficient of variation of gamma inter-arrivals (1 = Poisson)."
    )
    num_requests: int = Field(1000, ge=1, le=MAX_REQUESTS, description="Requests to generate.")
    input_length: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="Prompt tokens per request.")
    output_length: int = Field(128, ge=1, le=MAX_REQUEST_TOKENS, description="Generated tokens per request.")
    shared_prefix_length: int = Field(
        0, ge=0, description="Leading prompt tokens shared within a prefix group."
    )
    num_prefix_groups: int = Field(
        1, ge=1, description="Distinct shared prefixes; requests pick one uniformly."
    )

    @model_validator(mode="after")
    def _prefix_fits(self) -> SyntheticWorkload:
        if self.shared_prefix_length > self.input_length:
            raise _field_error("shared_prefix_length", f"longer than input_length ({self.input_length})")
        if self.input_length + self.output_length > MAX_REQUEST_TOKENS:
            raise _field_error("output_length", f"input_length + output_length over the limit of "
                               f"{MAX_REQUEST_TOKENS:,} tokens per request")  # fmt: skip
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds."""
        return self.num_requests * (self.input_length // page_size)


class TraceWorkload(_Section):
    """Replay of a recorded trace in time, open loop: Mooncake or Qwen-Bailian JSONL (hash_ids per block),
    Weka/AgentX trajectories (every call at its recorded ``t``, all trajectories from time 0; ``kind: lanes``
    plays them as aiperf does), or real token ids."""

    kind: Literal["trace"] = Field("trace", description="Workload type.")
    path: str = Field(description="Trace file, relative to the scenario file (or the current directory).")
    format: Literal["mooncake", "tokens", "bailian", "weka"] = Field(
        "mooncake",
        description="mooncake: timestamp ms, input_length, output_length, hash_ids; tokens: token-id records; "
        "bailian: Qwen-Bailian chat_id/parent_chat_id records; weka: AgentX trajectories (sim.workload.trajectory).",
    )
    block_size: int | None = Field(
        None, ge=1, description="Tokens per hash_id block; null = the format's (Mooncake 512, Bailian 16; Weka files say)."
    )
    time_scale: float = Field(1.0, gt=0, description="Multiplies inter-arrival times; > 1 slows arrivals.")
    max_requests: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Replay only the first N requests; null = all."
    )

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)


class _LaneReplay(_Section):
    """aiperf's agentic replay options (``aiperf profile`` flags in brackets; see :mod:`sim.serve.lanes`)."""

    lanes: int = Field(8, ge=1, le=100_000, description="Lanes: trajectory trees in flight at once (--concurrency).")
    trajectory_start_min_ratio: float = Field(
        0.25, ge=0, le=1, description="A lane's first trajectory starts at least this far into its span (--trajectory-start-min-ratio)."
    )
    trajectory_start_max_ratio: float = Field(
        0.75, ge=0, le=1, description="... and at most this far (--trajectory-start-max-ratio)."
    )
    warmup_requests_per_lane: int = Field(
        1, ge=0, le=1000, description="Parent calls before the start point sent first to warm the cache, not measured (--warmup-requests-per-lane)."
    )
    idle_gap_cap_s: float | None = Field(
        300.0, gt=0, description="Cap on each end-to-start idle gap, s; null = none (--trace-idle-gap-cap-seconds; AgentX runs use 300)."
    )
    benchmark_duration_s: float = Field(
        600.0, gt=0, description="Measured phase, s: no call is sent after it (--benchmark-duration)."
    )
    benchmark_grace_period_s: float | None = Field(
        30.0, ge=0, description="Calls in flight after the measured phase get this long to finish, then the run ends "
        "and the rest are unfinished; null = wait for all (--benchmark-grace-period, aiperf's default 30)."
    )

    @model_validator(mode="after")
    def _ratios(self) -> _LaneReplay:
        if self.trajectory_start_min_ratio > self.trajectory_start_max_ratio:
            raise _field_error("trajectory_start_min_ratio", "must be <= trajectory_start_max_ratio")
        return self


class LanesWorkload(_LaneReplay):
    """Weka/AgentX trajectories replayed in closed-loop lanes, as aiperf plays InferenceX's AgentX."""

    kind: Literal["lanes"] = Field("lanes", description="Workload type.")
    path: str = Field(description="Weka trajectories: JSON lines, a .json file or a folder of them.")
    format: Literal["weka"] = Field("weka", description="Trajectory format.")
    num_dataset_entries: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Use only the first N trajectories (--num-dataset-entries); null = all."
    )

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)


class AgenticWorkload(_LaneReplay):
    """Generated agentic sessions (:mod:`sim.workload.agentic`) replayed in lanes like a Weka trace. Defaults follow the
    published statistics of the SemiAnalysis AgentX corpus where there are some (aiperf's AgentX FAQ); the
    distribution shapes are assumptions."""

    kind: Literal["agentic"] = Field("agentic", description="Workload type.")
    sessions: int = Field(64, ge=1, le=100_000, description="Trajectories generated (the dataset lanes draw from, in order).")
    turns_per_session: float = Field(
        145.0, ge=1, description="Mean parent calls per session, geometric (FAQ: ~57K parent calls over 393 trajectories)."
    )
    system_tokens: int = Field(
        4160, ge=0, le=MAX_REQUEST_TOKENS, description="System + tools prefix, shared by a session and its subagents (FAQ example: 1,856 + 2,304)."
    )
    first_turn_tokens: int = Field(4032, ge=1, le=MAX_REQUEST_TOKENS, description="New tokens of the first call (FAQ example: 8,192 in all).")
    context_growth_tokens: float = Field(
        2000.0, gt=0, description="Mean new tokens a later call adds besides the previous output (AgentX: a few thousand a turn)."
    )
    growth_sigma: float = Field(1.0, ge=0, description="Lognormal sigma of the growth (assumption).")
    output_tokens: float = Field(500.0, gt=0, description="Mean output tokens (FAQ example: 312-822).")
    output_sigma: float = Field(0.8, ge=0, description="Lognormal sigma of the output (assumption).")
    think_time_s: float = Field(5.0, ge=0, description="Mean idle gap before a call, s (FAQ example: 5.6 s).")
    think_sigma: float = Field(1.5, ge=0, description="Lognormal sigma of the gap: a heavy tail, so the idle cap matters (assumption).")
    api_s_per_output_token: float = Field(
        0.012, ge=0, description="Recorded api_time per output token, s (FAQ example: 312 tokens in 4.1 s); only the recorded timeline uses it."
    )
    subagent_probability: float = Field(
        0.05, ge=0, le=1, description="Chance a parent call spawns a subagent group (with the two below: ~0.75 subagent calls per parent call, as the FAQ's 42K/57K)."
    )
    max_fanout: int = Field(4, ge=1, le=64, description="Subagents a spawn starts, uniform in 1..max_fanout (assumption).")
    subagent_turns: float = Field(6.0, ge=1, description="Mean calls of a subagent, geometric (assumption).")
    subagent_first_tokens: int = Field(8000, ge=1, le=MAX_REQUEST_TOKENS, description="A subagent's first new tokens (assumption).")
    spawn_gap_s: float = Field(1.0, ge=0, description="Mean gap between a parent call's end and its spawn, s (assumption).")
    max_context: int = Field(
        200_000, ge=1, le=MAX_REQUEST_TOKENS, description="A session ends before its input would pass this (AgentX contexts: 100K-200K)."
    )

    @model_validator(mode="after")
    def _fits(self) -> AgenticWorkload:
        for name in ("first_turn_tokens", "subagent_first_tokens"):
            if self.system_tokens + getattr(self, name) > self.max_context:
                raise _field_error(name, f"system_tokens + {name} passes max_context ({self.max_context:,})")
        if self.sessions * self.turns_per_session > MAX_REQUESTS:
            raise _field_error("sessions", f"sessions x turns_per_session over the limit of {MAX_REQUESTS:,} requests")
        return self


def _workload_tag(value: Any) -> str | None:
    """The workload kind; a mapping without one is multi_turn, the default workload."""
    return value.get("kind", "multi_turn") if isinstance(value, dict) else getattr(value, "kind", None)


Workload = Annotated[
    Union[  # noqa: UP007 - Annotated tags need the explicit Union form
        Annotated[MultiTurnWorkload, Tag("multi_turn")],
        Annotated[SyntheticWorkload, Tag("synthetic")],
        Annotated[TraceWorkload, Tag("trace")],
        Annotated[BenchServingWorkload, Tag("bench_serving")],
        Annotated[LanesWorkload, Tag("lanes")],
        Annotated[AgenticWorkload, Tag("agentic")],
    ],
    Discriminator(_workload_tag),
]
_WORKLOAD_CLASSES = (MultiTurnWorkload, SyntheticWorkload, TraceWorkload, BenchServingWorkload, LanesWorkload,
                     AgenticWorkload)
_WORKLOAD_KINDS = ("multi_turn", "synthetic", "trace", "bench_serving", "lanes", "agentic")


# -------------------------------------------------------------------------------------- cluster, hisparse


class ClusterConfig(_Section):
    """Instances sharing one L3; L1/L2 stay private to each instance."""

    instances: int = Field(1, ge=1, le=MAX_INSTANCES, description="Inference servers (TP groups).")
    router: Literal["round_robin", "cache_aware"] = Field(
        "round_robin", description="How requests pick an instance."
    )
    role: Literal["colocated", "decode"] = Field(
        "colocated", description="colocated prefill+decode, or a PD decode instance (HiSparse)."
    )


class HiSparseAccessConfig(_Section):
    """Which compressed tokens the indexer's top-k picks each step: a parametric model or a recorded trace."""

    kind: Literal["parametric", "trace"] = Field("parametric", description="Access model.")
    trace_path: str | None = Field(
        None, description="Recorded top-k trace (kind trace), relative to the scenario file."
    )
    sink_tokens: int = Field(4, ge=0, description="First compressed ids always selected (attention sinks; assumption).")
    recent_fraction: float = Field(
        0.25, ge=0, le=1, description="Share of top-k taken by the most recent compressed ids (assumption)."
    )
    overlap: float = Field(
        0.8, ge=0, le=1, description="Probability an older pick of the previous step is picked again (assumption)."
    )
    zipf_alpha: float = Field(1.0, ge=0, description="Zipf exponent of popularity over older tokens (assumption).")
    layers_simulated: int = Field(
        2, ge=1, description="C4 layers simulated (LRU state is per layer); results scale to all."
    )

    @field_validator("trace_path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)

    @model_validator(mode="after")
    def _trace_needs_path(self) -> HiSparseAccessConfig:
        if self.kind == "trace" and self.trace_path is None:
            raise _field_error("trace_path", "required when kind is trace")
        return self


class HiSparseConfig(_Section):
    """HiSparse decode offload of C4 KV (DESIGN.md 1.6); defaults from mem_cache/sparsity/factory.py:79-82."""

    enabled: bool = Field(False, description="HiSparse on (needs cluster.role: decode).")
    device_buffer_size: int = Field(
        4096, ge=1, description="GPU hot-buffer C4 slots per request (plus one 64-slot page for the newest)."
    )
    host_to_device_ratio: int = Field(
        2,
        ge=1,
        description="The device C4 pool is full tokens / (4 x this); SGLang's default 2 (the docs suggest 5-10).",
    )
    initial_fill: Literal["direct", "staging"] = Field(
        "direct",
        description="Hot buffer at decode start: direct (PD direct-to-host: empty unless the prompt fits) or "
        "staging (prefill staged on this GPU: the oldest tokens).",
    )
    top_k: int | None = Field(
        None,
        ge=1,
        description="Compressed tokens picked per step; null = the model's index_topk (512 Flash, 1024 Pro).",
    )
    policy: Literal["lru", "clock", "belady"] = Field(
        "lru", description="Hot-buffer replacement (SGLang: lru; belady is the offline bound)."
    )
    access: HiSparseAccessConfig = Field(
        default_factory=HiSparseAccessConfig, description="Top-k access model."
    )
    step_windows: int | None = Field(
        4, ge=1, description="Decode windows whose misses are simulated (spread over the output); null = all steps."
    )
    window_steps: int = Field(256, ge=1, description="Steps per simulated window.")
    sample_requests: int = Field(2, ge=1, description="Requests whose access streams are simulated.")


class SpeculativeConfig(_Section):
    """Speculative decoding (SGLang's --speculative-* flags): each decode pass drafts, verifies the draft tokens in
    one target forward and emits the accepted ones (:mod:`sim.model.speculative`).

    SGLang picks (num_steps, eagle_topk, num_draft_tokens) = (3, 1, 4) for DeepSeek models when none is given
    (``arg_groups/speculative_hook.py:1160-1175, 1430-1461``); NEXTN is an alias of EAGLE
    (``speculative/spec_registry.py:183``), and MTP here names the same path (the model's own NEXTN head).
    """

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "MTP"] | None = Field(
        None, description="--speculative-algorithm; null = no speculative decoding."
    )
    num_steps: int = Field(3, ge=1, le=32, description="--speculative-num-steps: draft forwards per pass.")
    eagle_topk: int = Field(1, ge=1, le=32, description="--speculative-eagle-topk: draft branches per step.")
    num_draft_tokens: int | None = Field(
        None, ge=1, le=256,
        description="--speculative-num-draft-tokens: tokens the target verifies per request per pass; null = "
        "num_steps + 1 (required with eagle_topk 1, base_spec_worker.py:117-127).",
    )
    accept_length: float | None = Field(
        None, ge=1,
        description="Mean tokens a request emits per verify pass (accepted drafts + the bonus token), as the "
        "server reports it (avg spec accept length); required with an algorithm. Published V4 runs: ~2.4-3.5.",
    )
    draft_layers: int = Field(
        1, ge=1, le=8,
        description="Layers of the draft model (DeepSeek's NEXTN/MTP head: 1); its KV and forwards cost this share "
        "of the target's layers.",
    )

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None

    @property
    def draft_tokens(self) -> int:
        """Tokens verified per request per pass."""
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.num_steps + 1

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.algorithm is None:
            return self
        if self.accept_length is None:
            raise _field_error("accept_length", "required with an algorithm: the mean tokens emitted per verify "
                               "pass (SGLang logs it as accept len)")  # fmt: skip
        if self.eagle_topk == 1 and self.draft_tokens != self.num_steps + 1:
            raise _field_error("num_draft_tokens", f"with eagle_topk 1 it must be num_steps + 1 = {self.num_steps + 1} "
                               "(SGLang asserts it, speculative/base_spec_worker.py:125)")  # fmt: skip
        if self.accept_length > self.num_steps + 1:
            raise _field_error("accept_length", f"{self.accept_length:g} exceeds num_steps + 1 = {self.num_steps + 1}, "
                               "the most one verify pass can emit")  # fmt: skip
        return self


class OutputConfig(_Section):
    """What a run records."""

    timeseries_interval_s: float = Field(
        1.0, gt=0, description="Sampling interval of the metrics time series, simulated s."
    )
    record_requests: bool = Field(True, description="Keep one record per request.")


# ------------------------------------------------------------------------------------------------ scenario


class Scenario(_Section):
    """A complete, validated simulation input. Build it with :func:`load_scenario` or :func:`scenario_from_dict`."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Scenario name, used in output paths (runs/NAME/) and reports: letters, digits, '.', '_', '-'.",
    )
    description: str = Field("", description="Free text.")
    seed: int = Field(0, ge=0, description="Seed of the one numpy Generator a run uses.")
    duration_s: float | None = Field(
        None, gt=0, description="Simulated-time cap, s; null = until the workload is exhausted."
    )
    model: ModelConfig = Field(
        default_factory=lambda: ModelConfig(name="deepseek-v4-flash"),
        description="Catalog name or inline pool list.",
    )
    hardware: HardwareConfig = Field(default_factory=HardwareConfig, description="GPU and host.")
    hicache: HiCacheConfig = Field(default_factory=HiCacheConfig, description="L2 host cache.")
    l3: L3Config = Field(default_factory=L3Config, description="L3 storage.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="Batching.")
    compute: ComputeConfig = Field(default_factory=ComputeConfig, description="GPU step-time roofline.")
    workload: Workload = Field(
        default_factory=MultiTurnWorkload, description="Request source, chosen by kind."
    )
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Instances and routing.")
    hisparse: HiSparseConfig = Field(
        default_factory=HiSparseConfig, description="Decode-side sparse offload."
    )
    speculative: SpeculativeConfig = Field(
        default_factory=SpeculativeConfig, description="Speculative decoding (EAGLE / NEXTN / MTP)."
    )
    output: OutputConfig = Field(default_factory=OutputConfig, description="Recording.")
    _derived: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill what a catalog GPU and a model config.json determine, where the scenario leaves it unset.

        The filled paths are remembered (:attr:`derived`) and left out of dumps, so that a dump with another
        GPU, TP size or memory fraction set on it (``--set``, a sweep grid) derives them afresh.
        """
        if not isinstance(data, dict):
            return data
        model, hw = data.get("model"), data.get("hardware")
        if not isinstance(model, dict | str | None) or not isinstance(hw, dict | None):
            return data  # the sections report it
        if not all(_numbers_ok(c, d) for c, d in ((ModelConfig, model), (HardwareConfig, hw),
                                                   (SchedulerConfig, data.get("scheduler")))):  # fmt: skip
            return data  # derive only from numbers in bounds; the sections report the others in their words
        model = {"name": model} if isinstance(model, str) else model
        config = model.get("config") if isinstance(model, dict) else None
        if config is None and isinstance(model, dict) and model.get("pools") is None:
            config = _named_config(model.get("name"))
        gpu_name = hw.get("gpu") if isinstance(hw, dict) else None
        if (config is None and gpu_name is None) or not isinstance(config, str | None) or not isinstance(
                gpu_name, str | None) or not isinstance(data.get("scheduler") or {}, dict) or not isinstance(
                data.get("compute") or {}, dict):  # fmt: skip
            return data  # nothing to derive, or a mistyped input the sections report in their words
        from sim.base.errors import InputError
        from sim.model import hardware, modelcfg

        hw = dict(hw or {})
        tp = hw.get("tp_size", 1)
        dp = hw.get("dp_size", 1) if hw.get("enable_dp_attention") is True else 1
        tp, dp = (tp, dp) if isinstance(tp, int) and isinstance(dp, int) and dp >= 1 and tp % dp == 0 else (1, 1)
        shape = None
        try:
            if config is not None:
                ref = config
                if not modelcfg.is_named(ref):
                    ref = _resolve_file(ref, info)
                cfg, name = modelcfg.load_config(ref)
                shape = modelcfg.derive(cfg, tp_size=tp, kv_dtype=model.get("kv_dtype", "auto"), name=name,
                                        expert_dtype=model.get("expert_dtype", "auto"),
                                        fp4_indexer=model.get("fp4_indexer") is True, attn_dp_size=dp)  # fmt: skip
        except (InputError, PydanticCustomError) as exc:
            raise _field_error("model.config", str(exc)) from None
        try:
            gpu = hardware.get_gpu(gpu_name) if gpu_name is not None else None
        except InputError as exc:
            raise _field_error("hardware.gpu", str(exc)) from None
        data = dict(data)
        sched = dict(data.get("scheduler") or {})
        derived: list[str] = []

        def fill(section: dict, name: str, key: str, value: Any) -> None:
            if key not in section:
                section[key] = value
                derived.append(f"{name}.{key}")

        if config is not None and isinstance(model, dict) and "config" not in model:  # a model by its HF id
            model = dict(model)
            fill(model, "model", "config", config)
            data["model"] = model
        if gpu is not None:
            fill(hw, "hardware", "gpu_name", gpu.name)
            fill(hw, "hardware", "gpu_mem_gb", round(gpu.memory_mib * hardware.MIB / 1e9, 3))
            fill(hw, "hardware", "hbm_bandwidth_tbps", gpu.hbm_tbps)
            fill(hw, "hardware", "peak_tflops", float(gpu.peak_tflops(shape.compute_dtype if shape else "bf16")))
            version = hw.get("sglang_defaults", "0.5.23")
            fill(sched, "scheduler", "chunked_prefill_size",
                 hardware.default_chunked_prefill_size(gpu.memory_mib, version))  # fmt: skip
            data["scheduler"] = sched
        if shape is not None:
            comp = dict(data.get("compute") or {})
            for key, value in (("prefill_flops_per_token", shape.flops_per_token),
                               ("attn_flops_per_token_per_ctx", shape.attn_flops_per_pair),
                               ("decode_bytes_per_step", shape.dense_weight_bytes),
                               ("kv_bytes_per_token_read", shape.kv_read_bytes_per_token),
                               ("kv_bytes_per_request", shape.kv_read_bytes_per_request),
                               ("expert_bytes", shape.expert_bytes), ("n_experts", shape.n_experts),
                               ("experts_per_token", shape.experts_per_token)):  # fmt: skip
                fill(comp, "compute", key, float(value) if isinstance(value, float) else value)
            data["compute"] = comp
            if gpu is not None and "kv_mem_gb" not in hw:
                mfs = hw.get("mem_fraction_static") or hardware.default_mem_fraction_static(
                    gpu, tp_size=tp, chunked_prefill_size=sched.get("chunked_prefill_size"),
                    max_running_requests=sched.get("max_running_requests"), mla=shape.family == "mla",
                    version=hw.get("sglang_defaults", "0.5.23"), attn_dp_size=dp)  # fmt: skip
                kv = hardware.kv_budget_bytes(gpu, mfs, shape.weight_bytes_per_rank)
                if kv <= 0:
                    raise _field_error("hardware.kv_mem_gb", f"the weights ({shape.weight_bytes_per_rank / 1e9:,.1f} GB "
                                       f"per rank) leave no KV memory at mem_fraction_static {mfs:g} on {gpu.name}")  # fmt: skip
                fill(hw, "hardware", "kv_mem_gb", round(kv / 1e9, 3))
        data["hardware"] = hw
        for path in derived:  # what a config.json implies is bounded too, and blamed on the config
            section, key = path.split(".")
            problem = number_problem(data[section][key])
            if problem is not None:
                origin = "model.config" if section == "compute" or config is not None else "hardware.gpu"
                raise _field_error(origin, f"{config or gpu_name} gives {path} = {problem} (check its sizes)")
        if isinstance(info.context, dict):
            info.context["derived"] = tuple(derived)
        return data

    @model_serializer(mode="wrap")
    def _leave_out_derived(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for path in self._derived:
            section, key = path.split(".")
            if isinstance(out.get(section), dict):
                out[section].pop(key, None)
        return out

    @property
    def derived(self) -> tuple[str, ...]:
        """Fields filled from the GPU catalog and the model config (left out of dumps, derived on load)."""
        return self._derived


    @model_validator(mode="after")
    def _cross_check(self, info: ValidationInfo) -> Scenario:
        self._derived = tuple((info.context or {}).get("derived", ())) if isinstance(info.context, dict) else ()
        hc = self.hicache
        if self.model.page_size is not None and self.model.page_size != hc.page_size:
            raise _field_error(
                "model.page_size", f"{self.model.page_size} differs from hicache.page_size {hc.page_size}"
            )
        if self.scheduler.chunked_prefill_size < hc.page_size:
            raise _field_error("scheduler.chunked_prefill_size", f"{self.scheduler.chunked_prefill_size} is below one "
                               f"page (hicache.page_size {hc.page_size}): SGLang rounds a chunk down to whole pages and "
                               "admits no prompt longer than it (schedule_policy.py:1664-1672)")  # fmt: skip
        if self.model.pools is None and self.model.name.startswith("deepseek-v4") and hc.page_size != 256:
            raise _field_error("hicache.page_size", "DeepSeek V4 models require 256 (asserted by SGLang)")
        if self.l3.enabled and not hc.enabled:
            raise _field_error("l3.enabled", "L3 needs hicache.enabled: true")
        if self.cluster.role == "decode" and self.workload.kind not in ("synthetic", "trace"):
            raise _field_error("workload.kind", "a decode instance (cluster.role: decode) needs a synthetic or "
                               f"trace workload, not {self.workload.kind}")  # fmt: skip
        if isinstance(self.workload, (MultiTurnWorkload, SyntheticWorkload, BenchServingWorkload)):
            pages = self.workload.pages(hc.page_size)
            if pages > MAX_WORKLOAD_PAGES:
                raise _field_error("workload", f"{pages:,} page keys of {hc.page_size} tokens, over the limit "
                                   f"of {MAX_WORKLOAD_PAGES:,} (fewer or shorter requests)")  # fmt: skip
        if self.hisparse.enabled:
            if self.cluster.role != "decode":
                raise _field_error(
                    "hisparse.enabled", "HiSparse runs only on decode instances; set cluster.role: decode"
                )
            top_k = self.hisparse_top_k
            if top_k is None:
                raise _field_error("hisparse.top_k", "required for a model without a catalog index_topk")
            if top_k > self.hisparse.device_buffer_size:
                raise _field_error(
                    "hisparse.top_k",
                    f"{top_k} exceeds hisparse.device_buffer_size {self.hisparse.device_buffer_size}",
                )
            h = self.hisparse
            steps = h.step_windows * h.window_steps if h.step_windows is not None else getattr(
                self.workload, "output_length", 0)  # fmt: skip
            ids = h.sample_requests * h.access.layers_simulated * steps * top_k
            if ids > MAX_HISPARSE_IDS:
                raise _field_error("hisparse.sample_requests", f"{ids:,} top-k ids to simulate (sample_requests x "
                                   "access.layers_simulated x steps x top_k), over the limit of "
                                   f"{MAX_HISPARSE_IDS:,}")  # fmt: skip
        if self.model.fp4_indexer:
            self._check_fp4_indexer()
        if self.speculative.enabled and self.scheduler.enable_mixed_chunk:
            raise _field_error("scheduler.enable_mixed_chunk", "not modelled with speculative decoding: SGLang runs "
                               "a mixed pass's decode rows as plain one-token decodes (speculative_hook.py:1103-1117)")  # fmt: skip
        if self.hardware.attn_dp_size > 1 and self.cluster.role == "decode":
            raise _field_error("hardware.enable_dp_attention", "DP attention is modelled on serving instances, not "
                               "on a PD decode instance (cluster.role: decode)")  # fmt: skip
        if self.speculative.enabled and self.cluster.role == "decode":
            raise _field_error("speculative.algorithm", "not modelled on a PD decode instance (cluster.role: decode)")
        if self.compute.backend == "aiconfigurator":
            from sim.model.aic import coverage_error

            if (err := coverage_error(self)) is not None:
                raise _field_error(*err)
        page_bytes = self.model.page_bytes(hc.page_size, self.hardware.tp_size, self.hardware.attn_dp_size)
        if page_bytes:
            device_pages = int(self.hardware.kv_mem_gb * 1e9 // page_bytes)
            if device_pages < 1:
                raise _field_error("hardware.kv_mem_gb", f"smaller than one page ({page_bytes:,} B)")
            if hc.enabled:
                host_pages = (
                    hc.host_pages if hc.host_pages is not None else int(device_pages * hc.hicache_ratio)
                )
                if host_pages < 1:
                    raise _field_error("hicache.hicache_ratio", "host pool smaller than one page")
                host_gb = host_pages * page_bytes * self.hardware.tp_size / 1e9
                if host_gb > self.hardware.host_mem_gb:
                    field = "hicache.host_pages" if hc.host_pages is not None else "hicache.hicache_ratio"
                    raise _field_error(
                        field,
                        f"host pool ({host_gb:,.1f} GB) exceeds hardware.host_mem_gb ({self.hardware.host_mem_gb:g})",
                    )
        return self

    def _check_fp4_indexer(self) -> None:
        spec = build_model_spec(self)
        if "c4_indexer" not in {p.name for p in spec.pools}:
            raise _field_error("model.fp4_indexer", f"applies to DeepSeek V4's C4 indexer; {spec.name} has none")
        gpu = self.hardware.gpu
        if gpu is not None and gpu.upper() not in FP4_INDEXER_GPUS:
            raise _field_error("model.fp4_indexer", f"SGLang refuses it on {gpu}: it needs SM100, SM120 or gfx95 "
                               f"({', '.join(FP4_INDEXER_GPUS)}; arg_groups/serving_hook.py:464-470)")  # fmt: skip

    @property
    def fp4_indexer_sized(self) -> bool:
        """Whether the pools are sized at the fp4 indexer's bytes: SGLang does so on ROCm only; on NVIDIA the FP4
        path keeps the FP8 estimate for sizing (``model_executor/pool_configurator.py:1109-1114``), so the same
        token count fits and the indexer buffer is smaller than budgeted."""
        return self.model.fp4_indexer and (self.hardware.gpu or "").upper() in HIP_GPUS

    @property
    def hisparse_top_k(self) -> int | None:
        """HiSparse top-k in effect: the explicit value, else the model's index_topk."""
        return self.hisparse.top_k or build_model_spec(self).index_topk or None


def build_model_spec(scenario: Scenario) -> Any:
    """The ``sim.model.pools.ModelSpec`` for the scenario's model (imports sim.model.pools lazily)."""
    from sim.model import pools

    m = scenario.model
    if m.config is not None:
        from sim.model.modelcfg import model_spec

        return model_spec(m.shape(scenario.hardware.tp_size, scenario.hardware.attn_dp_size), scenario.hicache.page_size)
    if m.pools is not None:
        d = m.model_dump(mode="json", exclude_none=True)
        d["page_size"] = scenario.hicache.page_size
        for p in d["pools"]:
            p.setdefault("anchor", p["name"])
        return pools.model_from_dict(d)
    return pools.get_model(
        m.name, page_size=scenario.hicache.page_size, bytes_per_token=m.generic_bytes_per_token,
        fp4_indexer=m.fp4_indexer,
    )
