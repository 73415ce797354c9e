"""The server a scenario describes, resolved once: its pools' pages, its per-rank budgets and the engine's
configuration, each sized value with the field it came from.

SGLang sizes all of this at start from its flags and the memory it finds (``kv_cache_configurator.py``,
``pool_configurator.py``); :func:`resolve` does the same from the scenario, and ``run``, ``plan``, ``validate``
and the run's summary read the :class:`ServerConfig` it returns rather than sizing anything themselves. A
capacity the server logged replaces the derivation (:mod:`sim.scenario.capacity`); where the two differ by more than
a page, :attr:`ServerConfig.mismatches` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.base.errors import InputError
from sim.cache.v4.swa import swa_cap_tokens
from sim.model.pools import ModelSpec
from sim.model.speculative import SpecDecode
from sim.model.unified_kv import unified_fixed
from sim.offline.replay import pages_for_bytes
from sim.scenario.capacity import capacity_sources, host_pages, logged_device_pools, logged_mismatches
from sim.scenario.precision import precisions, step_backend
from sim.scenario.schema import Scenario, build_model_spec
from sim.serve.cacheaware import CacheAwareOptions
from sim.serve.config import EngineConfig

__all__ = ["NoFullPool", "ServerConfig", "derived_device_pools", "device_pools", "dp_mlp_share", "rank_chunk",
           "rank_max_running", "resolve", "server_pools", "setting_rows", "validated_server"]  # fmt: skip


@dataclass(frozen=True)
class ServerConfig:
    """One scheduler's (one attention-DP rank's) pools and budgets, and the engine configuration built from them.

    ``sources`` names, for each pool (``l1``, ``swa``, ``l2``, ``l2_swa``), budget (``max_running_requests``,
    ``chunked_prefill_size``, ``dp_mlp_share``), precision (``<what>_dtype``, :attr:`precisions`) and the
    ``step_backend``, the scenario field or rule that set it: the server's log, a launch flag, or the derivation."""

    model: ModelSpec
    l1_pages: int
    swa_ratio: float  # the SWA device pool as a share of the Full one
    l2_pages: int
    l2_swa_pages: int | None  # None: no window, or the engine's own share of a given host page count
    max_running: int
    chunk: int
    dp_mlp_share: float
    sources: dict[str, str]
    mismatches: list[str]  # where the derivation misses a logged pool by more than a page
    engine: EngineConfig
    precisions: dict[str, str]  # experts, attention, kv, indexer: the dtype each is stored at (those known)
    step_backend: str  # what prices a pass, and on which GPU's figures or kernels

    @property
    def capacity_sources(self) -> dict[str, str]:
        """The pools' sources alone: what the summary's ``capacity_sources`` and ``validate`` print."""
        return {k: v for k, v in self.sources.items() if k in _POOLS}

    def settings(self) -> dict[str, dict]:
        """The budgets, precisions and step-time backend with their sources: the summary's ``server`` section."""
        budgets = dict(zip(_BUDGETS, (self.max_running, self.chunk, self.dp_mlp_share)))
        values = {**budgets, **{f"{k}_dtype": v for k, v in self.precisions.items()}, "step_backend": self.step_backend}
        return {"values": values, "sources": {k: self.sources[k] for k in values}}

    def lines(self, sc: Scenario) -> list[str]:
        """``validate``'s lines: each pool's pages per scheduler (none for a decode instance) and
        :func:`setting_rows`, each with where it came from (the server's log, a given field, the derivation)."""
        pages = {"l1": self.l1_pages, "swa": max(1, int(self.l1_pages * self.swa_ratio)), "l2": self.l2_pages,
                 "l2_swa": self.l2_swa_pages}  # fmt: skip
        pools = [] if sc.cluster.role == "decode" else [(k, f"{pages[k]:,} pages <- {v}")
                                                         for k, v in self.capacity_sources.items()
                                                         if pages[k] is not None]  # fmt: skip
        return [f"  {head if i == 0 else '':<9} " + f"{label} {text}".lstrip()
                for head, rows in {"pools": pools, **setting_rows(self.settings())}.items()
                for i, (label, text) in enumerate(rows)]  # fmt: skip


def setting_rows(settings: dict[str, dict]) -> dict[str, list[tuple[str, str]]]:
    """:meth:`ServerConfig.settings` as (label, "value <- source") rows under their heading (budgets, precision,
    step time; no MLP share without DP attention): what ``validate`` and the run's summary print."""
    values, sources = settings["values"], settings["sources"]

    def row(k: str) -> str:
        v = values[k]
        return (f"{v:,}" if isinstance(v, int) else f"{v:.3g}" if isinstance(v, float) else v) + f" <- {sources[k]}"

    budgets = [(k, row(k)) for k in _BUDGETS if k != "dp_mlp_share" or not sources[k].startswith("none (no DP")]
    return {"budgets": budgets, "precision": [(k.removesuffix("_dtype"), row(k)) for k in values if k.endswith("_dtype")],
            "step time": [("", row("step_backend"))]}


_BUDGETS = ("max_running_requests", "chunked_prefill_size", "dp_mlp_share")
_POOLS = ("l1", "swa", "l2", "l2_swa")


def resolve(sc: Scenario, model: ModelSpec | None = None) -> ServerConfig:
    """The server ``sc`` describes (``model``: its :func:`sim.scenario.load.build_model_spec`, when already built).
    Raises InputError where SGLang would not start (cap mode leaving no Full pool, a logged pool under a page)."""
    model = model if model is not None else build_model_spec(sc)
    derived = derived_device_pools(sc, model)
    l1, swa_ratio, l2, l2_swa = server_pools(sc, model, derived)
    dp = sc.hardware.attn_dp_size
    per_rank = "" if dp == 1 else " / hardware.attn_dp_size"
    share = dp_mlp_share(sc)
    sources = {**capacity_sources(sc, model),
               "max_running_requests": _budget_source(sc, "scheduler.max_running_requests") + per_rank,
               "chunked_prefill_size": _budget_source(sc, "scheduler.chunked_prefill_size") + per_rank,
               "dp_mlp_share": _mlp_share_source(sc)}  # fmt: skip
    dtypes = precisions(sc)
    sources.update({f"{k}_dtype": src for k, (_, src) in dtypes.items()})
    backend, sources["step_backend"] = step_backend(sc)
    sources = {k: _with_origin(sc, v) for k, v in sources.items()}
    return ServerConfig(model=model, l1_pages=l1, swa_ratio=swa_ratio, l2_pages=l2, l2_swa_pages=l2_swa,
                        max_running=rank_max_running(sc), chunk=rank_chunk(sc), dp_mlp_share=share, sources=sources,
                        mismatches=logged_mismatches(sc, *derived),
                        engine=_engine_config(sc, model, l1, swa_ratio, l2, l2_swa, share),
                        precisions={k: v for k, (v, _) in dtypes.items()}, step_backend=backend)  # fmt: skip


class NoFullPool(InputError):
    """Cap mode's SWA pool leaves no Full pool: SGLang refuses to start (the run's start check reports it)."""


def server_pools(sc: Scenario, model: ModelSpec,
                 derived: tuple[int, float] | None = None) -> tuple[int, float, int, int | None]:  # fmt: skip
    """(L1 Full pages, the SWA share of them, L2 Full pages, L2 SWA pages or None) one scheduler gets: the
    logged pools, else the derived ones (``derived``: :func:`derived_device_pools`, when already computed), and
    the host pools beside them (:func:`sim.scenario.capacity.host_pages`). The schema's fit check reads these too."""
    l1, swa_ratio = logged_device_pools(sc, *(derived if derived is not None else derived_device_pools(sc, model)))
    return (l1, swa_ratio, *host_pages(sc, model, l1, swa_ratio))


def device_pools(sc: Scenario, model: ModelSpec) -> tuple[int, float]:
    """(L1 Full pages, the SWA pool as a share of them): as the server logged them, else as derived
    (:func:`sim.scenario.capacity.logged_device_pools`)."""
    return logged_device_pools(sc, *derived_device_pools(sc, model))


def derived_device_pools(sc: Scenario, model: ModelSpec) -> tuple[int, float]:
    """(L1 Full pages, the SWA pool as a share of them) that the scenario's KV memory holds.

    In SGLang's cap mode the SWA pool is a fixed token count (:func:`sim.cache.v4.swa.swa_cap_tokens`) whose bytes come
    off the top, and the Full pool takes the rest (``pool_configurator.py:1438-1453, 1650-1669``); the share
    returned is then what that count is of the Full tokens. ROCm's unified layout takes its per-request SWA ring
    and compressor states off the top the same way (:func:`sim.model.unified_kv.unified_fixed`)."""
    hc, page = sc.hicache, sc.hicache.page_size
    kv_bytes = int(sc.hardware.kv_mem_gb * 1e9)
    if sc.model.fp4_indexer and not sc.fp4_indexer_sized:  # sized as if fp8 (Scenario.fp4_indexer_sized)
        model = build_model_spec(sc.model_copy(update={"model": sc.model.model_copy(update={"fp4_indexer": False})}))
    draft_share = 1 + sc.speculative.draft_layers / max(1, model.layers) if sc.speculative.enabled else 1.0
    if sc.speculative.enabled:  # the draft's KV layers share every pool token (sim.model.speculative)
        kv_bytes = int(kv_bytes / draft_share)
    if sc.model.kv_layout != "paged":  # ROCm's unified layout: the per-request rings come off the top
        spec = SpecDecode.from_scenario(sc, model.layers)
        rings = unified_fixed(model.name, rank_max_running(sc), fp8=sc.model.kv_layout == "unified_fp8",
                              draft_tokens=spec.draft_tokens if spec else 0)  # fmt: skip
        # The SWA ring is inflated for the draft as the tokens are, the states are not (pool_configurator.py:1250-1257)
        fixed = rings.swa_ring + (rings.c4_state + rings.c128_state) / draft_share
        if fixed >= kv_bytes:
            raise InputError(f"model.kv_layout: the unified layout's per-request SWA ring and compressor states "
                             f"({fixed / 1e9:,.2f} GB at {rank_max_running(sc):,} requests) leave no Full pool in "
                             f"hardware.kv_mem_gb {sc.hardware.kv_mem_gb:g}; lower scheduler.max_running_requests")
        kv_bytes -= fixed
    if hc.swa_full_tokens_ratio != "cap" or not model.has_swa:
        ratio = 0.1 if hc.swa_full_tokens_ratio == "cap" else hc.swa_full_tokens_ratio  # no window: moot
        return pages_for_bytes(model, kv_bytes, page, ratio), ratio
    spec = SpecDecode.from_scenario(sc, model.layers)
    swa_tokens = swa_cap_tokens(model.sliding_window, page, rank_max_running(sc), rank_chunk(sc),
                                spec.draft_tokens if spec else 1, spec.reserve if spec else None)  # fmt: skip
    swa_bytes = swa_tokens * model.group_bytes_per_page("swa") / model.page_size
    l1 = pages_for_bytes(model, kv_bytes - swa_bytes, page, 0.0) if swa_bytes < kv_bytes else 0
    if l1 <= 0:
        raise NoFullPool(f"hicache.swa_full_tokens_ratio: cap mode's SWA pool ({swa_tokens:,} tokens, "
                         f"{swa_bytes / 1e9:,.2f} GB) leaves no Full pool in hardware.kv_mem_gb "
                         f"{sc.hardware.kv_mem_gb:g}; lower scheduler.max_running_requests")  # fmt: skip
    return l1, swa_tokens / (l1 * page)


def rank_max_running(sc: Scenario) -> int:
    """Requests one scheduler runs at once: with DP attention, the cap split over the ranks
    (``mem_cache/kv_cache_configurator.py:3119-3132``; the pools are sized for it, ``pool_configurator.py:956``)."""
    return max(1, sc.scheduler.max_running_requests // sc.hardware.attn_dp_size)


def rank_chunk(sc: Scenario) -> int:
    """Prefill tokens one scheduler chunks by: with DP attention, the size split over the ranks
    (``arg_groups/parallel_hook.py:326-335``)."""
    return max(1, sc.scheduler.chunked_prefill_size // sc.hardware.attn_dp_size)


def dp_mlp_share(sc: Scenario) -> float:
    """With DP attention, the MLP/MoE share of a rank's per-token FLOPs: the MoE layers run over the tokens
    all ranks gathered (``managers/scheduler_components/dp_attn.py:518-676``), so every rank's pass carries
    that share of the others' tokens. From the model's config; a catalog V4 model without one takes the bundled
    V4-Flash config's share (an estimate for V4-Pro); 0 for other models without a config."""
    hw = sc.hardware
    if hw.attn_dp_size == 1:
        return 0.0
    if sc.model.config is not None:
        shape = sc.model.shape(hw.tp_size, hw.attn_dp_size)
    elif sc.model.pools is None and sc.model.name.startswith("deepseek-v4"):
        from sim.model.modelcfg import derive, load_config

        shape = derive(load_config("deepseek-v4-flash")[0], tp_size=hw.tp_size, attn_dp_size=hw.attn_dp_size)
    else:
        return 0.0
    return shape.mlp_flops_per_token / shape.flops_per_token


def _mlp_share_source(sc: Scenario) -> str:
    """Where :func:`dp_mlp_share` took its share from, by the same rules."""
    if sc.hardware.attn_dp_size == 1:
        return "none (no DP attention)"
    if sc.model.config is not None:
        return "model.config"
    if sc.model.pools is None and sc.model.name.startswith("deepseek-v4"):
        return "the bundled deepseek-v4-flash config (an estimate)"
    return "none (no model config)"


def _budget_source(sc: Scenario, path: str) -> str:
    """A budget's field, and SGLang's default rule where that filled it (the GPU's memory,
    ``hardware.sglang_defaults``); a recorded origin (:func:`_with_origin`) says more. Whether a value was typed
    or is the schema's default is not told: a run's resolved ``scenario.yaml`` types every field, and its rerun
    must summarise the same."""
    if path in sc.derived:
        hw = sc.hardware
        return f"{path} (SGLang {hw.sglang_defaults}'s default for {hw.gpu_name}'s memory, hardware.sglang_defaults)"
    return path


def _with_origin(sc: Scenario, source: str) -> str:
    """``source`` with what set its field where the scenario records it (``origins``, written by ``scenario
    from-sglang``: the launch flag or the server-log line)."""
    path = source.split(" ")[0].rstrip(",")
    origin = sc.origins.get(path)
    return source if origin is None else f"{source}, from {origin}"


def _router_options(sc: Scenario) -> CacheAwareOptions:
    """``cluster.router_*``: sglang_router's cache_aware options (read by ``cluster.router: cache_aware`` only)."""
    c = sc.cluster
    return CacheAwareOptions(c.router_cache_threshold, c.router_balance_abs_threshold, c.router_balance_rel_threshold,
                             c.router_eviction_interval_s, c.router_max_tree_size)  # fmt: skip


def _engine_config(sc: Scenario, model: ModelSpec, l1: int, swa_ratio: float, l2: int, l2_swa: int | None,
                   share: float) -> EngineConfig:  # fmt: skip
    """The engine's configuration: the resolved pools and budgets, and the scenario's policies as given."""
    hc, l3, sched = sc.hicache, sc.l3, sc.scheduler
    page = hc.page_size
    dp = sc.hardware.attn_dp_size  # one scheduler, KV pool, tree and host pool per attention-DP rank
    page_bytes = model.bytes_per_page * page / model.page_size
    return EngineConfig(
        model=model, instances=sc.cluster.instances * dp, router=sc.cluster.router, cache_aware=_router_options(sc),
        l1_pages=l1, l2_pages=l2, l2_swa_pages=l2_swa,
        write_policy=hc.write_policy, eviction_policy=hc.radix_eviction_policy,
        eviction_config=hc.radix_eviction_policy_config,
        load_back_threshold=hc.load_back_threshold, page_tokens=page,
        swa_full_tokens_ratio=swa_ratio, io_backend=hc.cost_backend, host_layout=hc.mem_layout,
        max_running_requests=rank_max_running(sc), schedule_policy=sched.schedule_policy,
        chunked_prefill_size=rank_chunk(sc), max_prefill_tokens=sched.max_prefill_tokens,
        enable_mixed_chunk=sched.enable_mixed_chunk, overlap_schedule=sched.overlap_schedule,
        tokenizer_tokens_per_s=sched.tokenizer_tokens_per_s, tokenizer_workers=sched.tokenizer_workers,
        disable_consecutive_prefill_overlap=sched.disable_consecutive_prefill_overlap,
        prefill_decode_interval=sched.prefill_decode_interval,
        prefill_decode_interval_min_bs=sched.prefill_decode_interval_min_bs,
        tbo_threshold=sched.tbo_token_distribution_threshold if sched.enable_two_batch_overlap else None,
        l3_enabled=l3.enabled, l3_read_Bps=l3.read_gbps * 1e9, l3_write_Bps=l3.write_gbps * 1e9,
        l3_latency_s=l3.latency_ms / 1e3,
        l3_capacity_pages=None if l3.capacity_gb is None else int(l3.capacity_gb * 1e9 // page_bytes),
        l3_io_batch_pages=l3.io_batch_pages, l3_all_window_pages=l3.window_pages == "all",
        prefetch_threshold=hc.prefetch_threshold,
        prefetch_policy=hc.prefetch_policy, prefetch_timeout_base_s=hc.prefetch_timeout_base_s,
        prefetch_timeout_per_ki_token_s=hc.prefetch_timeout_per_ki_token_s, duration_s=sc.duration_s,
        sample_interval_s=sc.output.timeseries_interval_s, record_requests=sc.output.record_requests,
        spec=SpecDecode.from_scenario(sc, model.layers), dp_size=dp, dp_mlp_share=share,
        load_balance_method="round_robin" if sched.load_balance_method == "auto" else sched.load_balance_method,
        enable_prefill_delayer=sched.enable_prefill_delayer,
        prefill_delayer_max_delay_passes=sched.prefill_delayer_max_delay_passes,
        prefill_delayer_token_usage_low_watermark=sched.prefill_delayer_token_usage_low_watermark,
    )  # fmt: skip


def validated_server(sc: Scenario) -> ServerConfig | None:
    """The server ``validate`` prints; None where the run would refuse it at start (it reports why there)."""
    try:
        return resolve(sc)
    except InputError:
        return None
