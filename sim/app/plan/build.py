"""A plan: every question of the report turned into independent runs, run together, then read into sections.

All runs (timed engine runs over seeds, request-order replays, the clairvoyant bound, the one-pass curve)
are listed first, so one progress bar has their total, then run in worker processes. Sections only read
the outcomes; nothing here is tuned to a result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from sim.app.plan import tasks, tierages
from sim.app.seeds import interval
from sim.base.errors import InputError
from sim.model.hardware import NODE_DRAM_GB
from sim.model.hostmem import (
    V4_AUTO_REFUSED,
    HostCandidate,
    auto_ratio,
    host_bytes,
    host_candidate,
    largest_fitting_ratio,
)
from sim.model.pinning import PinCeiling, platform_ceiling
from sim.model.pools import ModelSpec
from sim.scenario.load import Scenario, apply_overrides, build_model_spec, scenario_from_dict

__all__ = ["PlanSpec", "make_plan", "parse_slo"]

SLO_KEYS = {"ttft_p90": "ttft_p90_s", "ttft_mean": "ttft_mean_s", "ttft_p99": "ttft_p99_s", "itl": "tpot_mean_s",
            "tpot": "tpot_mean_s"}  # fmt: skip
TIMED = ("input_tokens_per_s", "output_tokens_per_s", "ttft_mean_s", "ttft_p90_s", "tpot_mean_s", "hit_device",
         "hit_host", "hit_storage", "hit_total")  # fmt: skip


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_p90=2s,itl=50ms`` -> {``ttft_p90_s``: 2.0, ``tpot_mean_s``: 0.05}: each target once, with its unit
    (a bare ``itl=50`` could mean 50 ms or 50 s). Raises InputError."""
    from sim.base.inputs import number_problem

    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep or key not in SLO_KEYS:
            raise InputError(f"--slo {item.strip()}: expected one of {', '.join(SLO_KEYS)}=VALUE (e.g. ttft_p90=2s)")
        if SLO_KEYS[key] in out:
            raise InputError(f"--slo {item.strip()}: {key} is given twice")
        scale = 1e-3 if value.endswith("ms") else 1.0 if value.endswith("s") else None
        try:
            if scale is None:
                raise ValueError
            seconds = float(value.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            raise InputError(f"--slo {item.strip()}: cannot read {value!r} as a time with its unit (2s, 50ms)") from None
        if (problem := number_problem(seconds)) is not None or not seconds > 0:
            raise InputError(f"--slo {item.strip()}: {problem or 'must be > 0'}")
        out[SLO_KEYS[key]] = seconds
    return out


@dataclass
class PlanSpec:
    """What the user asked: the setup, the candidates and the targets."""

    scenario: Scenario
    launch: str | None = None
    slo: dict[str, float] = field(default_factory=dict)
    ratios: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0, 16.0])
    sizes_gb: list[float] = field(default_factory=list)
    node_dram_gb: float = NODE_DRAM_GB
    gpus_per_node: int = 8
    pinnable_gb: float | None = None  # --pinnable-gb: the pinnable ceiling per node; None: pin_ceiling's default
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    policies: list[str] = field(default_factory=lambda: ["write_through", "write_through_selective", "write_back"])
    swa_ratios: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2, 0.5])
    l3_policies: list[str] = field(default_factory=lambda: ["best_effort", "wait_complete", "timeout"])
    l3_thresholds: list[int] = field(default_factory=lambda: [64, 256, 1024])
    decode: Scenario | None = None
    decode_batches: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    curve_points: int = 12

    @property
    def pin_ceiling(self) -> PinCeiling:
        """The ceiling on a node's pinned host pools: ``--pinnable-gb``, else the scenario's
        ``hardware.pinnable_gb``, else the platform's rule on ``node_dram_gb`` (:mod:`sim.model.pinning`)."""
        hw = self.scenario.hardware
        if self.pinnable_gb is not None:
            return PinCeiling(self.pinnable_gb, "--pinnable-gb")
        if hw.pinnable_gb is not None:
            return hw.pin_ceiling
        return platform_ceiling(hw.platform, self.node_dram_gb, "the node DRAM")


def _variant(sc: Scenario, sets: list[str], label: str) -> Scenario:
    """``sc`` with ``key=value`` overrides, validated (the host check is the plan's own: see sim.model.hostmem)."""
    unbound = ["hardware.pinnable_gb=null"] if sc.hardware.pinnable_gb is not None else []
    data = apply_overrides(sc.model_dump(mode="json"), [f"hardware.host_mem_gb={1e9}", *unbound, *sets])
    return scenario_from_dict(data, source=f"plan {label}", check_files=False)


class _Jobs:
    """The run list: each job a call and a key; outcomes read back by key."""

    def __init__(self) -> None:
        self.calls: list[tuple[Callable[..., Any], tuple]] = []
        self.keys: list[tuple] = []
        self.results: dict[tuple, dict] = {}

    def add(self, key: tuple, fn: Callable[..., Any], *args: Any) -> None:
        self.keys.append(key)
        self.calls.append((fn, args))

    def get(self, key: tuple) -> Any:
        out = self.results.get(key)
        return out["value"] if out and out["status"] == "ok" else None

    def error(self, key: tuple) -> str | None:
        out = self.results.get(key)
        return out.get("error") if out and out["status"] != "ok" else None


def _host_candidates(spec: PlanSpec, sc: Scenario) -> tuple[list[HostCandidate], float, int, float | None]:
    from sim.scenario.resolve import resolve

    server = resolve(sc)
    model, l1, swa_ratio = server.model, server.l1_pages, server.swa_ratio
    page = sc.hicache.page_size
    common = dict(l1_pages=l1, swa_ratio=swa_ratio if model.has_swa else 0.0, page_tokens=page,
                  tp_size=sc.hardware.tp_size, node_dram_gb=spec.node_dram_gb, gpus_per_node=spec.gpus_per_node,
                  pinnable_gb=spec.pin_ceiling.gb)  # fmt: skip
    ratios = list(spec.ratios)
    if sc.hicache.enabled and sc.hicache.host_pages is None and sc.hicache.hicache_ratio not in ratios:
        ratios.append(sc.hicache.hicache_ratio)  # the user's own setup is always a candidate
    cands = [host_candidate(model, ratio=r, **common) for r in sorted(ratios)]
    cands += [host_candidate(model, size_gb=g, **common) for g in spec.sizes_gb]
    auto = auto_ratio(model, l1_pages=l1, swa_ratio=common["swa_ratio"], page_tokens=page,
                      node_dram_gb=spec.node_dram_gb, ranks_per_node=min(sc.hardware.tp_size, spec.gpus_per_node))  # fmt: skip
    if auto is None:  # DeepSeek-V4: HiCache without --hicache-ratio does not start
        cands.append(HostCandidate("auto (no --hicache-ratio)", "", None, None, l1, 0, 0, {},
                                   cands[0].ranks_per_node, cands[0].nodes, cands[0].budget_per_rank, "refused",
                                   V4_AUTO_REFUSED))  # fmt: skip
    elif auto > 0 and not any(c.ratio is not None and abs(c.ratio - auto) < 1e-9 for c in cands):
        cands.append(host_candidate(model, ratio=round(auto, 3), label=f"auto (ratio {auto:.3g})", **common))
    return cands, swa_ratio, l1, auto


def _candidate_scenario(sc: Scenario, c: HostCandidate, policy: str | None = None) -> Scenario:
    sets = ["hicache.enabled=true", f"hicache.write_policy={policy or sc.hicache.write_policy}"]
    sets += [f"hicache.host_pages={c.l2_pages}"] if c.size_gb is not None else [
        "hicache.host_pages=null", f"hicache.hicache_ratio={c.ratio}"]  # fmt: skip
    return _variant(sc, sets, c.label)


@dataclass
class _Setup:
    """What every section's runs are built from: the scenario, its model and the host candidates; a scenario on
    ``boundary`` (the policy simulator's rule, not a server's) is run on write_through."""

    spec: PlanSpec
    model: ModelSpec
    cands: list[HostCandidate]
    swa_ratio: float
    l1: int
    auto: float | None
    order: tasks.Order | None = None  # the replays' request order: a timed run's admissions (multi-turn)

    @property
    def sc(self) -> Scenario:
        return self.spec.scenario

    @property
    def page(self) -> int:
        return self.sc.hicache.page_size

    @property
    def startable(self) -> list[HostCandidate]:
        return [c for c in self.cands if c.status != "refused"]

    @property
    def base_policy(self) -> str:
        return self.sc.hicache.write_policy if self.sc.hicache.write_policy != "boundary" else "write_through"

    def bytes_per_node(self, l2_pages: int) -> int:
        ranks = min(self.sc.hardware.tp_size, self.spec.gpus_per_node)
        return host_bytes(self.model, self.l1, l2_pages, self.swa_ratio if self.model.has_swa else 0.0, self.page) * ranks


@dataclass
class _Curve:
    """The host sizes the hit-rate curve is read at (``dense``: the one-pass curve's finer grid)."""

    grid: list[int]
    dense: list[int]
    exact: bool
    why: str


def make_plan(spec: PlanSpec, *, workers: int | None = None, progress: bool = False, executor: str = "local",
              ray_address: str | None = None) -> dict:  # fmt: skip
    """Run everything the report needs; return its data (plain, JSON-ready).

    Every section's runs are listed first (one progress bar has their total), run together, then read back."""
    setup, notes = _setup(spec)
    spec, model, jobs = setup.spec, setup.model, _Jobs()
    _add_timed_jobs(jobs, setup)
    curve = _add_curve_jobs(jobs, setup)
    wp_cand = _add_policy_jobs(jobs, setup)
    l3_cand = _add_l3_jobs(jobs, setup)
    swa_rows_spec = _add_swa_jobs(jobs, setup)
    _add_hisparse_jobs(jobs, spec)
    _run(jobs, workers=workers, progress=progress, executor=executor, ray_address=ray_address)
    data = {
        "scenario": spec.scenario.name, "model": model.name, "pools": len(model.pools), "seeds": list(spec.seeds),
        "slo": dict(spec.slo), "runs": len(jobs.calls), "notes": notes,
        "failed_runs": [{"key": list(map(str, k)), "error": jobs.error(k)} for k in jobs.keys if jobs.error(k)],
        "host_memory": _host_section(setup), "value": _value_with_curve(setup, jobs, curve),
        "write_policy": _policy_section(spec, jobs, wp_cand),
        "l3": _l3_section(spec, jobs, l3_cand),
        "tier_ages": tierages.section(spec.seeds, ["L1 only", *(c.label for c in setup.startable)], jobs.get),
        "swa": _swa_section(jobs, swa_rows_spec) if model.has_swa else {"applies": False,
                                                                        "reason": f"{model.name} has no SWA pool"},
        "hisparse": _hisparse_section(spec, jobs),
    }  # fmt: skip
    data["recommendation"] = _recommend(spec, data, setup.cands)
    return data


def _setup(spec: PlanSpec) -> tuple[_Setup, list[str]]:
    """Check the main scenario, keep one seed for a trace, size the host candidates."""
    sc = spec.scenario
    model = build_model_spec(sc)
    if sc.cluster.role == "decode":
        raise InputError("plan: the main scenario must be a serving (prefill or colocated) instance; give a decode "
                         "instance with --decode")  # fmt: skip
    notes = []
    if sc.workload.kind == "trace" and len(spec.seeds) > 1:  # nothing random in a replayed trace
        spec = replace(spec, seeds=spec.seeds[:1])
        notes.append("a trace replays its own arrivals and prompts, so the seed changes nothing: one seed, no "
                     "intervals")  # fmt: skip
    cands, swa_ratio, l1, auto = _host_candidates(spec, sc)
    order = None
    if sc.workload.kind == "multi_turn":  # a closed loop's order is the server's doing: take it from a timed run
        order = tasks.admission_order(sc.model_copy(update={"seed": spec.seeds[0]}))
        notes.append(f"the replays serve the requests in the order the timed run of the scenario as given (seed "
                     f"{spec.seeds[0]}) first admitted them")  # fmt: skip
    return _Setup(spec, model, cands, swa_ratio, l1, auto, order), notes


def _add_timed_jobs(jobs: _Jobs, s: _Setup) -> None:
    """Value of host memory: timed runs at each startable candidate and L1 only, every seed."""
    l1_only = _variant(s.sc, ["hicache.enabled=false"], "L1 only")
    for seed in s.spec.seeds:
        jobs.add(("timed", "L1 only", seed), tasks.timed_run, l1_only.model_copy(update={"seed": seed}))
        for c in s.startable:
            jobs.add(("timed", c.label, seed), tasks.timed_run,
                     _candidate_scenario(s.sc, c, s.base_policy).model_copy(update={"seed": seed}))  # fmt: skip


def _add_curve_jobs(jobs: _Jobs, s: _Setup) -> _Curve:
    """The hit-rate curve over host sizes: replays (V4) or the one-pass curve (single pool), and the bound."""
    from sim.cache.mrc import applies_to

    sc, l1, points = s.sc, s.l1, s.spec.curve_points
    top = max([c.l2_pages for c in s.cands] + [l1 * 2])
    grid = sorted({0, *(round(top * i / (points - 1)) for i in range(points)), *(c.l2_pages for c in s.cands)})
    exact, why = applies_to(s.model)
    dense = sorted({round(top * i / 400) for i in range(401)}) if exact else []
    if exact:
        jobs.add(("mrc",), tasks.mrc_curve, sc, [max(l1, g) for g in grid], [max(l1, g) for g in dense], s.order)
        for g in grid:
            jobs.add(("replay", g), tasks.replay_single, sc, l1, g, s.base_policy, s.order)
    else:
        for g in grid:
            jobs.add(("replay", g), tasks.replay_swa, sc, l1, g, s.swa_ratio, s.base_policy, s.order)
    jobs.add(("bound",), tasks.clairvoyant_hits, sc, [l1 + g for g in grid], s.order)
    return _Curve(grid, dense, exact, why)


def _add_policy_jobs(jobs: _Jobs, s: _Setup) -> HostCandidate | None:
    """Write policy at the scenario's own host size (or the first startable candidate)."""
    startable = s.startable
    cand = next((c for c in startable if c.ratio == s.sc.hicache.hicache_ratio and c.size_gb is None),
                startable[0] if startable else None)  # fmt: skip
    if cand is not None:
        for pol in s.spec.policies:
            for seed in s.spec.seeds:
                jobs.add(("policy", pol, seed), tasks.timed_run,
                         _candidate_scenario(s.sc, cand, pol).model_copy(update={"seed": seed}))  # fmt: skip
    return cand


def _add_l3_jobs(jobs: _Jobs, s: _Setup) -> HostCandidate | None:
    """L3: at the smallest startable host pool (where L2 evicts most), storage on."""
    cand = min(s.startable, key=lambda c: c.l2_pages) if s.startable else None
    if cand is not None:
        base_l3 = _candidate_scenario(s.sc, cand, s.base_policy)
        for pol in s.spec.l3_policies:
            for th in s.spec.l3_thresholds:
                v = _variant(base_l3, ["l3.enabled=true", f"hicache.prefetch_policy={pol}",
                                       f"hicache.prefetch_threshold={th}"], f"L3 {pol} {th}")  # fmt: skip
                for seed in s.spec.seeds:
                    jobs.add(("l3", pol, th, seed), tasks.timed_run, v.model_copy(update={"seed": seed}))
        for pol in s.spec.policies:  # L3's marginal value: each write policy with storage on and off
            for on in (True, False):
                v = _variant(_candidate_scenario(s.sc, cand, pol), [f"l3.enabled={str(on).lower()}"], f"L3 {on} {pol}")
                for seed in s.spec.seeds:
                    jobs.add(("l3w", pol, on, seed), tasks.timed_run, v.model_copy(update={"seed": seed}))
    return cand


def _add_swa_jobs(jobs: _Jobs, s: _Setup) -> list[tuple[float, int, int]]:
    """DeepSeek-V4: the SWA pool's share of the same KV bytes, L1 only and with the scenario's host ratio;
    returns (swa ratio, Full pages, host pages) per share."""
    from sim.offline.replay import pages_for_bytes

    if not s.model.has_swa:
        return []
    sc, rows_spec = s.sc, []
    kv_bytes = int(sc.hardware.kv_mem_gb * 1e9)
    for r in s.spec.swa_ratios:
        full = pages_for_bytes(s.model, kv_bytes, s.page, r)
        host = int(full * sc.hicache.hicache_ratio)
        rows_spec.append((r, full, host))
        for tier, l2 in (("l1", 0), ("l1l2", host)):
            jobs.add(("swa", r, tier), tasks.replay_swa, sc, full, l2, r, s.base_policy, s.order)
            jobs.add(("nowin", r, tier), tasks.replay_single, sc, full, l2, s.base_policy, s.order)
    jobs.add(("nowin", "unbounded"), tasks.replay_single, sc, None, 0, s.base_policy, s.order)  # first-seen misses
    return rows_spec


def _add_hisparse_jobs(jobs: _Jobs, spec: PlanSpec) -> None:
    """HiSparse on a decode instance: throughput against the batch cap, on and off."""
    if spec.decode is None:
        return
    for b in spec.decode_batches:
        for on in (True, False):
            v = _variant(spec.decode, [f"scheduler.max_running_requests={b}", f"hisparse.enabled={str(on).lower()}"],
                         f"HiSparse batch {b}")  # fmt: skip
            jobs.add(("hisparse", b, on), tasks.timed_run, v)


def _run(jobs: _Jobs, *, workers: int | None, progress: bool, executor: str, ray_address: str | None) -> None:
    from sim.app.parallel import run_calls

    outcomes = run_calls(jobs.calls, workers=workers, progress=progress, desc="plan", executor=executor,
                         ray_address=ray_address)  # fmt: skip
    jobs.results = dict(zip(jobs.keys, outcomes))


def _host_section(s: _Setup) -> dict:
    spec, model, page = s.spec, s.model, s.page
    return {"node_dram_gb": spec.node_dram_gb, "gpus_per_node": spec.gpus_per_node, "tp_size": s.sc.hardware.tp_size,
            "l1_pages": s.l1, "page_tokens": page, "auto_ratio": s.auto,
            "largest_fitting_ratio": largest_fitting_ratio(
                model, l1_pages=s.l1, swa_ratio=s.swa_ratio if model.has_swa else 0.0, page_tokens=page,
                tp_size=s.sc.hardware.tp_size, node_dram_gb=spec.node_dram_gb, gpus_per_node=spec.gpus_per_node,
                pinnable_gb=spec.pin_ceiling.gb),
            "pinnable_gb": spec.pin_ceiling.gb, "pinnable_source": spec.pin_ceiling.source,
            "pools": [{"name": p.name, "anchor": p.anchor, "bytes_per_page": int(p.bytes_per_page * page / model.page_size)}
                      for p in model.pools if p.bytes_per_page],
            "candidates": [c.as_dict() for c in s.cands]}  # fmt: skip


def _value_with_curve(s: _Setup, jobs: _Jobs, curve: _Curve) -> dict:
    """The value section, with the one-pass curve on its dense grid where it applies."""
    value = _value_section(s.spec, jobs, s.cands, s.startable, curve.grid, s.bytes_per_node, curve.exact, curve.why)
    if curve.exact and jobs.get(("mrc",)):
        value["one_pass_dense"] = [{"l2_pages": g, "host_gb_per_node": s.bytes_per_node(g) / 1e9, "hit": h}
                                   for g, h in zip(curve.dense, jobs.get(("mrc",))["dense"])]  # fmt: skip
    return value


def _figure(values: list[float]) -> dict:
    """Mean and 95% interval of one figure over the seeds."""
    iv = interval(values)
    return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "n": iv.n}


def _figures(rows: list[dict]) -> dict:
    """Mean and 95% interval of each timed figure over the seeds' rows."""
    out = {}
    for m in TIMED:
        vals = [r[m] for r in rows if r is not None and m in r]
        if vals:
            out[m] = _figure(vals)
    return out


def _value_section(spec, jobs, cands, startable, grid, grid_bytes, exact, why) -> dict:
    points = []
    for label in ["L1 only", *(c.label for c in startable)]:
        rows = [jobs.get(("timed", label, s)) for s in spec.seeds]
        c = next((c for c in cands if c.label == label), None)
        points.append({"label": label, "host_bytes_per_node": c.per_node if c else 0,
                       "host_bytes_per_rank": c.per_rank if c else 0, "l2_pages": c.l2_pages if c else 0,
                       "seeds_ok": sum(r is not None for r in rows), **_figures(rows)})  # fmt: skip
    points.sort(key=lambda p: p["host_bytes_per_node"])
    bound = jobs.get(("bound",)) or [None] * len(grid)
    curve = []
    mrc = jobs.get(("mrc",)) if exact else None
    for i, g in enumerate(grid):
        rep = jobs.get(("replay", g)) or {}
        curve.append({"l2_pages": g, "host_gb_per_node": grid_bytes(g) / 1e9,
                      "replay_l1": rep.get("l1_hit"), "replay_l1l2": rep.get("l1l2_hit"),
                      "one_pass": mrc["hit"][i] if mrc else None, "clairvoyant": bound[i]})  # fmt: skip
    knee = _knee([(p["host_gb_per_node"], p["replay_l1l2"]) for p in curve if p["replay_l1l2"] is not None])
    gaps = [abs(p["one_pass"] - p["replay_l1l2"]) for p in curve if p["one_pass"] is not None and p["replay_l1l2"] is not None]
    marginal = []
    for a, b in zip(points, points[1:]):
        gb = (b["host_bytes_per_node"] - a["host_bytes_per_node"]) / 1e9
        if gb > 0 and "hit_total" in a and "hit_total" in b:
            marginal.append({"from": a["label"], "to": b["label"], "gb_per_node": gb,
                             "hit_points_per_gb": 100 * (b["hit_total"]["mean"] - a["hit_total"]["mean"]) / gb,
                             "input_tok_s_per_gb": (b["input_tokens_per_s"]["mean"] - a["input_tokens_per_s"]["mean"]) / gb})  # fmt: skip
    return {"points": points, "curve": curve, "knee_gb_per_node": knee, "marginal": marginal,
            "curve_method": "one-pass stack distances (checked against replays)" if exact else "replays at each size",
            "curve_exact": exact, "curve_reason": why, "one_pass_max_gap": max(gaps) if gaps else None}  # fmt: skip


def _knee(xy: list[tuple[float, float]]) -> float | None:
    """Where the curve bends most (Kneedle: the point farthest above the chord from the first to the last)."""
    xy = sorted(xy)
    if len(xy) < 3:
        return None
    (x0, y0), (x1, y1) = xy[0], xy[-1]
    if x1 <= x0 or y1 <= y0:
        return None
    best = max(xy, key=lambda p: (p[1] - y0) / (y1 - y0) - (p[0] - x0) / (x1 - x0))
    return best[0]


def _policy_section(spec, jobs, cand) -> dict:
    rows = []
    for pol in spec.policies:
        runs = [jobs.get(("policy", pol, s)) for s in spec.seeds]
        ok = [r for r in runs if r is not None]
        dropped = {}
        for r in ok:
            for k, v in r.items():
                if k.startswith("dropped_") and k != "dropped_tokens":
                    dropped[k.removeprefix("dropped_")] = dropped.get(k.removeprefix("dropped_"), 0) + v / len(ok)
        rows.append({"policy": pol, "seeds_ok": len(ok), **_figures(runs), "dropped_tokens_by_reason": dropped,
                     "d2h_bytes": interval([r.get("link_bytes_d2h", 0) for r in ok]).mean if ok else None,
                     "backup_bytes": interval([r["backup_bytes"] for r in ok]).mean if ok else None})  # fmt: skip
    return {"candidate": cand.label if cand else None, "rows": rows}


def _l3_section(spec, jobs, cand) -> dict:
    rows = []
    for pol in spec.l3_policies:
        for th in spec.l3_thresholds:
            ok = [r for r in (jobs.get(("l3", pol, th, s)) for s in spec.seeds) if r is not None]

            def mean(k: str, ok: list[dict] = ok) -> float | None:
                return sum(r.get(k, 0) for r in ok) / len(ok) if ok else None

            rows.append({"prefetch_policy": pol, "prefetch_threshold": th, "seeds_ok": len(ok),
                         "prefetches": mean("storage_prefetches"),
                         "requested_tokens": mean("storage_prefetch_requested_tokens"),
                         "cut_below_threshold": mean("storage_unfulfilled_below_threshold"),
                         "cut_deadline": mean("storage_unfulfilled_deadline"),
                         "cut_host_capacity": mean("storage_unfulfilled_host_capacity"),
                         "prefetched_tokens": mean("prefetched_tokens"),
                         **_figures(ok)})  # fmt: skip
    return {"candidate": cand.label if cand else None, "rows": rows, "marginal": _l3_marginal(spec, jobs)}


def _l3_marginal(spec: PlanSpec, jobs: _Jobs) -> list[dict]:
    """Per write policy: the hits L3 adds (on less off, paired seed by seed) against the bytes it writes. Every
    page a backup lands in the host pool goes on to storage once its copy is acked (SGLang's write-through ack,
    ``mem_cache/unified_radix_cache.py:1803-1818``), so a write policy that backs up more writes more to L3."""
    out = []
    for pol in spec.policies:
        on = {s: jobs.get(("l3w", pol, True, s)) for s in spec.seeds}
        off = {s: jobs.get(("l3w", pol, False, s)) for s in spec.seeds}
        paired = [s for s in spec.seeds if on[s] is not None and off[s] is not None]
        if not paired:
            continue
        gained = _figure([on[s]["hit_total"] - off[s]["hit_total"] for s in paired])
        written = _figure([float(on[s].get("link_bytes_l3_write", 0)) for s in paired])
        out.append({"write_policy": pol, "seeds_ok": len(paired),
                    "hit_total_off": _figures([off[s] for s in paired])["hit_total"],
                    "hit_total_on": _figures([on[s] for s in paired])["hit_total"],
                    "hit_storage": _figures([on[s] for s in paired])["hit_storage"],
                    "gained": gained, "l3_write_bytes": written,
                    "gained_points_per_tb": 100 * gained["mean"] / (written["mean"] / 1e12)
                    if written["mean"] > 0 else None})  # fmt: skip
    return out


def _swa_section(jobs, rows_spec) -> dict:
    unbounded = jobs.get(("nowin", "unbounded"))
    first_seen = 1 - unbounded["l1_hit"] if unbounded else None
    rows = []
    for r, full, host in rows_spec:
        row = {"swa_full_tokens_ratio": r, "l1_full_pages": full, "l2_full_pages": host}
        for tier in ("l1", "l1l2"):
            v4, nowin = jobs.get(("swa", r, tier)), jobs.get(("nowin", r, tier))
            key = "l1_hit" if tier == "l1" else "l1l2_hit"
            if v4 and nowin:
                row[f"{tier}_hit_v4"] = v4[key]
                row[f"{tier}_hit_no_window"] = nowin[key]
                row[f"{tier}_lost_to_swa"] = nowin[key] - v4[key]
                row[f"{tier}_missed_without_window"] = 1 - nowin[key]
                if first_seen is not None:
                    row[f"{tier}_missed_evicted"] = 1 - nowin[key] - first_seen
                row[f"{tier}_swa_evicted_tokens"] = v4["swa_evicted_tokens"]
        rows.append(row)
    return {"applies": True, "missed_first_seen": first_seen, "rows": rows}


def _hisparse_section(spec, jobs) -> dict:
    if spec.decode is None:
        return {"applies": False, "reason": "no decode instance given (--decode SCENARIO.yaml)"}
    rows = []
    for b in spec.decode_batches:
        on, off = jobs.get(("hisparse", b, True)), jobs.get(("hisparse", b, False))
        rows.append({"batch_cap": b, "on_output_tok_s": on and on["output_tokens_per_s"],
                     "off_output_tok_s": off and off["output_tokens_per_s"],
                     "on_peak_batch": on and on.get("hisparse_peak_batch"),
                     "off_peak_batch": off and off.get("hisparse_peak_batch"),
                     "speedup": (on["output_tokens_per_s"] / off["output_tokens_per_s"])
                     if on and off and off["output_tokens_per_s"] else None})  # fmt: skip
    crossover = None
    for i, row in enumerate(rows):
        if row["speedup"] is not None and all(r["speedup"] is not None and r["speedup"] >= 1 for r in rows[i:]):
            crossover = row["batch_cap"]
            break
    out = {"applies": True, "scenario": spec.decode.name, "rows": rows, "crossover_batch": crossover}
    last = jobs.get(("hisparse", spec.decode_batches[-1], True)) or {}
    if last.get("hisparse_family") == "dsa":  # a DSA model: SGLang's sizing, whatever the batch cap
        out["dsa_sizing"] = {k: last[f"hisparse_{k}"] for k in (
            "capacity_gain", "host_to_device_ratio", "kv_dtype", "max_batch_baseline", "max_batch_hisparse",
            "host_pool_bytes_per_rank", "anchor_layers", "skip_layers")}  # fmt: skip
    return out


def _recommend(spec: PlanSpec, data: dict, cands: list[HostCandidate]) -> dict:
    """The cheapest setup (least pinned host memory per node) whose every SLO figure's 95% upper bound (the
    mean with one seed) is within target; L1 only counts as the cheapest of all."""
    from sim.interop.tosglang import launch_command

    points = data["value"]["points"]
    verdicts = []
    for p in points:
        checks = {}
        for metric, target in spec.slo.items():
            fig = p.get(metric)
            checks[metric] = None if fig is None else {"upper": fig["hi"], "mean": fig["mean"], "target": target,
                                                       "met": fig["hi"] <= target}  # fmt: skip
        met = bool(spec.slo) and all(c is not None and c["met"] for c in checks.values()) and p["seeds_ok"] > 0
        verdicts.append({"label": p["label"], "host_bytes_per_node": p["host_bytes_per_node"], "checks": checks,
                         "meets": met})  # fmt: skip
    if not spec.slo:
        best = max((p for p in points if "input_tokens_per_s" in p), key=lambda p: p["input_tokens_per_s"]["mean"],
                   default=None)  # fmt: skip
        choice, why = best, "no SLO given: the highest input throughput"
    else:
        meeting = [p for p, v in zip(points, verdicts) if v["meets"]]
        choice = min(meeting, key=lambda p: p["host_bytes_per_node"]) if meeting else None
        bound = ("95% upper bounds" if len(spec.seeds) > 1 else
                 "figures (one seed: no interval, so the figure itself, not an upper bound)")  # fmt: skip
        why = (f"the least pinned host memory per node whose {bound} meet every SLO" if choice else
               f"none of the candidates meets the SLOs (their {bound})")  # fmt: skip
    out = {"criterion": why, "verdicts": verdicts, "choice": choice["label"] if choice else None}
    if choice is not None:
        sc = spec.scenario
        c = next((c for c in cands if c.label == choice["label"]), None)
        chosen = _candidate_scenario(sc, c) if c else _variant(sc, ["hicache.enabled=false"], "L1 only")
        cmd, notes = launch_command(chosen, spec.launch, hicache_size_gb=c.size_gb if c else None)
        out.update(launch=cmd, notes=notes, host_bytes_per_node=choice["host_bytes_per_node"])
    return out
