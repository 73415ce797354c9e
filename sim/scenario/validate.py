"""``hicache-sim validate``'s summary of a scenario: what it loads to and the server it resolves to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sim.base.text import printable
from sim.scenario.load import load_scenario
from sim.scenario.pinned import pinned_lines
from sim.scenario.resolve import ServerConfig, validated_server
from sim.scenario.schema import ClusterConfig, MultiTurnWorkload, Scenario, SyntheticWorkload, TraceWorkload

__all__ = ["validate_file"]


def validate_file(path: str | Path, overrides: Sequence[str] = (), *, check_start: Callable[[Scenario], None] | None = None,
                  server: Callable[[Scenario], ServerConfig | None] | None = None) -> str:  # fmt: skip
    """Load and check a scenario; return a short human summary for ``hicache-sim validate``.

    ``check_start`` (:func:`sim.app.run.check_startable`) also reads what a run reads when it starts (cost table,
    traces), so every error ``run`` would raise at start is raised here. ``server`` resolves the scenario's server
    (default :func:`sim.scenario.resolve.validated_server`), whose pools, budgets, precisions and step-time backend are
    printed with their sources."""
    s = load_scenario(path, overrides, check_start=check_start)
    resolved = (server or validated_server)(s)
    hc, hw = s.hicache, s.hardware
    page_bytes = s.model.page_bytes(hc.page_size, hw.tp_size, hw.attn_dp_size)
    experts = resolved.precisions.get("experts") if resolved is not None else None
    lines = [
        f"{path}: ok ({s.name})",
        f"  model     {s.model.name}, page {hc.page_size} tokens"
        + (f", {page_bytes:,} B/page/rank" if page_bytes else "")
        + (f", experts {experts}" + (" (auto: the checkpoint's)" if s.model.expert_dtype == "auto" else "")
           if experts else ""),
    ]  # fmt: skip
    kv = (f"{hw.max_total_num_tokens:,} tokens as logged (hardware.max_total_num_tokens; the derived "
          f"{hw.kv_mem_gb:g} GB KV does not size it)" if hw.max_total_num_tokens is not None else f"{hw.kv_mem_gb:g} GB KV")
    lines.append(
        f"  L1        {kv} on {hw.gpu_name} ({hw.gpu_mem_gb:g} GB), TP {hw.tp_size}"
        + (f", DP attention {hw.attn_dp_size} (a pool per rank, {s.scheduler.load_balance_method})"
           if hw.attn_dp_size > 1 else "")
    )
    if s.speculative.enabled:
        sp = s.speculative
        lines.append(f"  spec      {sp.algorithm}, {sp.num_steps} steps, topk {sp.eagle_topk}, {sp.draft_tokens} draft "
                     f"tokens, accept length {sp.accept_length:g}")  # fmt: skip
    if hc.enabled:
        size = f"{hc.host_pages} pages" if hc.host_pages is not None else f"ratio {hc.hicache_ratio:g}"
        lines.append(
            f"  L2        on, {size}, {hc.write_policy}, load_back >= {hc.load_back_threshold}, io {hc.io_backend}/{hc.mem_layout}"
        )
    else:
        lines.append("  L2        off")
    lines.append(
        f"  L3        on, {s.l3.read_gbps:g}/{s.l3.write_gbps:g} GB/s r/w, prefetch >= {hc.prefetch_threshold}, {hc.prefetch_policy}"
        if s.l3.enabled
        else "  L3        off"
    )
    lines += [f"  workload  {_workload_text(s.workload)}", *(resolved.lines(s) if resolved is not None else []),
              *pinned_lines(s, resolved)]
    lines.append(
        f"  cluster   {s.cluster.instances} instance(s), {_router_text(s.cluster)}, {s.cluster.role}; "
        f"hisparse {'on, top_k ' + str(s.hisparse_top_k) if s.hisparse.enabled else 'off'}"
    )
    # names, paths and origins come from the user's files
    return "\n".join(map(printable, [*lines, *_dsa_hisparse_lines(s)]))


def _dsa_hisparse_lines(s: Any) -> list[str]:
    """A DSA model's HiSparse pools a rank, as SGLang sizes them (:func:`sim.hisparse.dsa.dsa_pools`)."""
    if not s.hisparse.enabled:
        return []
    from sim.hisparse.dsa import dsa_pools
    from sim.hisparse.dsadecode import dsa_layout_of

    lay = dsa_layout_of(s)
    if lay is None:
        return []
    kv, ratio = s.hardware.kv_mem_gb * 1e9, s.hisparse.host_to_device_ratio
    off, on = dsa_pools(lay, kv), dsa_pools(lay, kv, ratio)
    return [f"  hisparse  DSA, {lay.kv_dtype} KV, {lay.anchors} anchor + {lay.skip_layers} shared-index layers: "
            f"{on.logical_tokens:,} KV tokens a rank at ratio {ratio} (off {off.logical_tokens:,}: "
            f"{on.logical_tokens / off.logical_tokens:.2f}x) in {on.device_slots:,} device slots; host pool "
            f"{on.host_bytes / 1e9:,.1f} GB a rank"]  # fmt: skip


def _workload_text(wl: Any) -> str:
    """``validate``'s one-line description of a workload."""
    if isinstance(wl, MultiTurnWorkload):
        rate = "closed loop" if wl.request_rate is None else f"{wl.request_rate:g} req/s {wl.distribution}"
        lo, hi = wl.round_range()
        rounds = f"{lo}" if lo == hi else f"{lo}-{hi}"
        return f"multi_turn, {wl.num_clients} clients x {rounds} rounds, {wl.request_length}+{wl.output_length} tokens/round, {rate}"
    if isinstance(wl, SyntheticWorkload):
        return f"synthetic, {wl.num_requests} requests at {wl.rate:g} req/s ({wl.arrival}), {wl.input_length}+{wl.output_length} tokens"
    if isinstance(wl, TraceWorkload):
        return f"trace ({wl.format}) {wl.path}, time_scale {wl.time_scale:g}"
    if wl.kind in ("lanes", "agentic"):
        what = f"{wl.format} {wl.path}" if wl.kind == "lanes" else f"{wl.sessions} generated sessions"
        what += f" (aiperf's synthesizer, {wl.aiperf_config})" if getattr(wl, "synthesizer", "") == "aiperf" else ""
        cap = "none" if wl.idle_gap_cap_s is None else f"{wl.idle_gap_cap_s:g} s"
        return (f"{wl.kind}, {wl.lanes} lanes over {what}, {wl.benchmark_duration_s:g} s measured, idle cap {cap}, "
                f"start {wl.trajectory_start_min_ratio:g}-{wl.trajectory_start_max_ratio:g}")  # fmt: skip
    return f"bench_serving {wl.dataset_name}, {len(wl.steps)} step(s), {sum(st.num_prompts for st in wl.steps)} prompts"


def _router_text(c: ClusterConfig) -> str:
    """The router, with cache_aware's options as sglang_router's flags name them."""
    if c.router != "cache_aware":
        return c.router
    trim = (f"trim to {c.router_max_tree_size:,} tokens every {c.router_eviction_interval_s} s"
            if c.router_eviction_interval_s else "no trim")  # fmt: skip
    return (f"cache_aware (match > {c.router_cache_threshold:g}; imbalanced past {c.router_balance_abs_threshold} "
            f"and x{c.router_balance_rel_threshold:g}; {trim})")
