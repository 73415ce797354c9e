"""A scenario, end to end: build the engine from the validated YAML, play it out, summarise, write.

Outputs (``DIR/summary.json``, ``requests.parquet``, ``timeseries.parquet``, ``scenario.yaml``) are written
into a staging folder renamed into place at the end (:func:`sim.base.fileio.staged_dir`), so a folder holds one
whole run or does not exist. Per-request records can stream to ``requests.parquet`` while the run goes.
``summary.json`` is strict JSON holding only simulated quantities (no wall-clock time), so the same scenario
and seed give the same bytes.

The time series is bounded (``MAX_TIMESERIES_ROWS``): the recorder keeps every other sampling tick once
it holds that many rows, and an interval that certainly gives too many ticks (arrivals or a duration cap
spanning them) is widened up front; the scenario written out records the interval actually used, and the
caller is told.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sim.app import tierages
from sim.base.errors import InputError
from sim.base.fileio import staged_dir
from sim.base.inputs import MAX_SIMULATED_S
from sim.base.progress import advance_to, progress_bar
from sim.base.text import plural
from sim.cache.v4.hicache import check_v4_setup
from sim.model.compute import Roofline, attention_pairs
from sim.model.costs import CostTable, resolve_cost_table
from sim.model.pricing import step_model
from sim.scenario.load import Scenario, build_model_spec, dump_resolved
from sim.scenario.pinned import pinned_summary
from sim.scenario.precision import expert_dtype
from sim.scenario.resolve import ServerConfig, resolve, setting_rows
from sim.serve import clients
from sim.serve.config import EngineConfig
from sim.serve.engine import Simulation
from sim.serve.metrics import (
    LINKS,
    MAX_TIMESERIES_ROWS,
    Recorder,
    RequestWriter,
    SampleBuffer,
    dropped_by_reason,
    percentiles,
)
from sim.serve.scheduler.instance_state import new_cache
from sim.workload.request import Request
from sim.workload.stream import Concat, Cost, RequestStream, Survey, survey
from sim.workload.synthetic import arrival_times, multi_turn_requests, random_ids_requests, shared_prefix
from sim.workload.traces import trace_requests
from sim.workload.trajectory import Trajectory, WekaCorpus

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["RunResult", "build", "check_startable", "run_scenario", "sample_interval", "write_files", "write_outputs"]

UNMEASURED_ROOFLINE_WARNING = ("{gpu} is priced on the roofline: its datasheet over efficiencies estimated, not "
                               "measured. Fit them to one run of your own: hicache-sim calibrate compute --from "
                               "RESULTS --scenario S.yaml --out T.json")  # fmt: skip
LONG_RUN_REQUESTS = 100_000  # ~20 s and more at ~5,000 simulated requests per wall second (bench/engine.py)
MAX_SAMPLE_ROWS_BUILT = 2_000_000  # sampler rows likely built (then mostly thinned): ~10 s of sampling
Notify = Callable[[str], None]


@dataclass
class RunResult:
    """A finished run: its summary and tables. ``sim`` is the prefill/colocated simulation (None for a
    decode instance); ``tables`` holds extra outputs by file stem (``misses`` for HiSparse)."""

    scenario: Scenario
    summary: dict
    wall_s: float
    requests: pd.DataFrame | None  # None when the records were streamed to a file
    timeseries: pd.DataFrame
    sim: Simulation | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def build(sc: Scenario, costs: CostTable | None = None, notify: Notify | None = None,
          server: ServerConfig | None = None, progress: bool = False) -> tuple[Simulation, object, int | None]:  # fmt: skip
    """(simulation, arrival process, requests it will send: None when the run decides, as lanes do) of the server
    ``server`` (:func:`sim.scenario.resolve.resolve` of ``sc`` when not given). The workload streams: its requests are
    made (or read) as they are sent, so none is held here. ``progress``: report the trace's first read-through as
    it goes."""
    server = server if server is not None else resolve(sc)
    cfg = server.engine
    costs = costs if costs is not None else resolve_cost_table(sc.hardware.cost_table)
    rng = np.random.default_rng(sc.seed)  # the Simulation draws nothing until it runs
    # refuses what its backend cannot price, before any work; the experts at the dtype memory was sized at
    pricer = step_model(sc, costs.compute_params, server.precisions.get("experts"))
    serial = serial_seconds(Roofline.from_scenario(sc, costs.compute_params))
    w = sc.workload
    if w.kind == "multi_turn":
        convos = multi_turn_requests(w.num_clients, w.num_rounds, w.request_length, w.output_length,
                                     cfg.page_tokens, system_prompt_length=w.system_prompt_length,
                                     sub_question_length=w.sub_question_input_length,
                                     rounds=w.client_rounds(rng), range_ratio=w.range_ratio, rng=rng)  # fmt: skip
        span = len(convos) / w.request_rate if w.request_rate else 0.0
        sim = _simulation(sc, cfg, costs, pricer, rng, convos.survey(serial), span, notify)
        return sim, clients.bench_multiturn(sim, convos, w), len(convos)
    if w.kind == "bench_serving":
        steps, rid = [], 0
        for i, st in enumerate(w.steps):
            reqs = random_ids_requests(st.num_prompts, st.random_input_len, st.random_output_len,
                                       st.random_range_ratio, st.seed, cfg.page_tokens, step=i, first_rid=rid)  # fmt: skip
            rid += len(reqs)
            steps.append((st, reqs))
        span = sum(st.num_prompts / st.request_rate for st in w.steps if st.request_rate)
        sim = _simulation(sc, cfg, costs, pricer, rng, Concat([r for _, r in steps]).survey(serial), span, notify)
        return sim, clients.bench_serving(sim, steps), rid
    if w.kind in ("lanes", "agentic"):
        from sim.serve.lanes import LanePlayer

        trajs = lane_trajectories(w, cfg.page_tokens, rng)
        calls = survey((c for t in trajs for c in t.calls()), serial)
        sim = _simulation(sc, cfg, costs, pricer, rng, calls, w.benchmark_duration_s, notify)
        sim.client = LanePlayer(sim, trajs, w)
        return sim, sim.client.run(), None  # the calls sent depend on the run
    reqs = open_loop_stream(sc, cfg.page_tokens, rng)
    seen = reqs.survey(serial, progress)  # a trace: read through once (every record checked) before the replay reads it
    sim = _simulation(sc, cfg, costs, pricer, rng, seen, seen.last_arrival_s, notify)
    return sim, sim.trace_arrivals(reqs), seen.requests


def _simulation(sc: Scenario, cfg: EngineConfig, costs: CostTable, pricer, rng: np.random.Generator,
                seen: Survey, arrival_span: float, notify: Notify | None) -> Simulation:  # fmt: skip
    """The simulation of the surveyed workload with passes priced by ``pricer``
    (:func:`sim.model.pricing.step_model`), sampling at the interval :func:`sample_interval` chooses."""
    interval = sample_interval(sc, seen, arrival_span, notify)
    sim = Simulation(replace(cfg, sample_interval_s=interval), costs, pricer, rng)
    check_admissible(sim, seen.smallest)
    return sim


def check_admissible(sim: Simulation, req: Request | None) -> None:
    """Refuse, before the run, a workload whose smallest request ``req`` an empty cache cannot admit: every
    request would be dropped (``exceeds_kv_capacity``), a result no one wants to wait for. Lane calls get
    their page keys only when sent, so a lane workload (``req`` None) is not checked here."""
    if req is None:
        return
    if new_cache(sim.cfg).try_admit(req) is not None:  # empty, as the instance's was at the start
        return
    cfg = sim.cfg
    swa = cfg.model.has_swa
    pools = f"L1 {cfg.l1_pages:,} pages of {cfg.page_tokens} tokens" + (f", SWA {cfg.swa_full_tokens_ratio:.3g} of that" if swa else "")
    raise InputError(f"hardware.kv_mem_gb: the empty device pools ({pools}) cannot admit "
                     f"the workload's smallest request ({req.input_len:,} + {req.output_len:,} tokens), so every "
                     "request would be dropped; give more KV memory"
                     + (" or a larger hicache.swa_full_tokens_ratio" if swa else ""))  # fmt: skip


def serial_seconds(roofline: Roofline) -> Cost:
    """The seconds to serve requests one at a time at the roofline's figures (no batching, no cache hits:
    prefill, then each output token as a decode step of its own), which batching usually beats by far: the
    end of a run that :func:`sample_interval` sizes the time series by (the roofline whatever the backend:
    a bound, not a result)."""

    def cost(n_in: np.ndarray, n_out: np.ndarray) -> float:
        prefill = roofline.prefill_seconds(n_in, attention_pairs(n_in, 0))
        decode = n_out * (roofline.decode_seconds(1, n_in + n_out) + roofline.overhead_s)
        return float(np.sum(prefill + decode + roofline.overhead_s))

    return cost


def sample_interval(sc: Scenario, seen: Survey, arrival_span: float, notify: Notify | None = None) -> float:
    """The time-series interval to sample at: the scenario's, widened when it would certainly give more
    than ``MAX_TIMESERIES_ROWS`` rows (the arrivals or a duration cap span that many intervals), or when the
    sampler would likely build more than ``MAX_SAMPLE_ROWS_BUILT`` rows (thinned as it goes, but each costs
    time) before the run ends. The end is taken as the last arrival plus each instance's share of the
    workload's :func:`serial_seconds` (``seen.cost``)."""
    asked, instances = sc.output.timeseries_interval_s, sc.cluster.instances * sc.hardware.attn_dp_size  # one row a rank
    if seen.requests >= LONG_RUN_REQUESTS and notify is not None:
        notify(f"{seen.requests:,} requests on {instances} instance(s): expect a minute or more "
               f"(~5,000 simulated requests per wall second)")  # fmt: skip
    serial = seen.cost
    low, high = arrival_span, arrival_span + serial / instances
    if min(high, sc.duration_s or math.inf) > MAX_SIMULATED_S:
        raise InputError(f"workload: the run would span about {high:.3g} s of simulated time (arrivals over "
                         f"{arrival_span:.3g} s, then up to {serial / instances:.3g} s of serving at the scenario's "
                         f"compute figures), over the limit of {MAX_SIMULATED_S:g} s: check the workload's rates "
                         "and compute.* / hardware.* figures")  # fmt: skip
    if sc.duration_s is not None:
        low = high = sc.duration_s
    rows = low / asked * instances
    if rows > MAX_TIMESERIES_ROWS:
        wider = _round_up(low / max(1, MAX_TIMESERIES_ROWS // instances))
        why = f"would give {rows:,.0f} time-series rows (limit {MAX_TIMESERIES_ROWS:,})"
    elif high / asked * instances > MAX_SAMPLE_ROWS_BUILT:
        wider = _round_up(high * instances / MAX_SAMPLE_ROWS_BUILT)
        why = f"could mean sampling {high / asked:,.0f} times"
    else:
        return asked
    if notify is not None:
        notify(f"output.timeseries_interval_s: {asked:g} s {why}; sampling every {wider:g} s instead")
    return wider


def _round_up(x: float) -> float:
    """The next of 1, 2, 5 x 10^k at or above ``x``."""
    k = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * 10.0**k >= x:
            return m * 10.0**k
    return 10.0 ** (k + 1)


def _kept_interval(interval: float, samples: SampleBuffer, notify: Notify | None) -> float:
    """The interval of the samples kept, telling the user when the recorder thinned them."""
    if samples.stride > 1 and notify is not None:
        notify(f"output.timeseries_interval_s: the time series reached {MAX_TIMESERIES_ROWS:,} rows; kept every "
               f"{interval * samples.stride:g} s")  # fmt: skip
    return interval * samples.stride


def _with_interval(sc: Scenario, interval: float) -> Scenario:
    """The scenario as run: the time-series interval actually used."""
    if interval == sc.output.timeseries_interval_s:
        return sc
    return sc.model_copy(update={"output": sc.output.model_copy(update={"timeseries_interval_s": interval})})


def decode_timeline(sc: Scenario) -> bool:
    """Whether ``sc`` runs as a decode instance in time (:mod:`sim.hisparse.decode`): a PD decode instance, or
    HiSparse on a DSA model's colocated instance (the checks allow HiSparse nowhere else)."""
    return sc.cluster.role == "decode" or sc.hisparse.enabled


def open_loop_requests(sc: Scenario, page: int, rng: np.random.Generator) -> list[Request]:
    """The requests of a synthetic or trace workload, with their arrival times, made now."""
    return list(open_loop_stream(sc, page, rng))


def open_loop_stream(sc: Scenario, page: int, rng: np.random.Generator) -> RequestStream:
    """The requests of a synthetic or trace workload, with their arrival times, made as they are sent."""
    w = sc.workload
    if w.kind == "synthetic":
        times = arrival_times(w.num_requests, w.rate, rng, process=w.arrival, cv=w.cv)
        return shared_prefix(w.num_requests, w.num_prefix_groups, w.shared_prefix_length, w.input_length,
                             w.output_length, page, times, rng)  # fmt: skip
    if w.kind == "trace":
        return trace_requests(w.path, fmt=w.format, block_size=w.block_size, page_size=page,
                              time_scale=w.time_scale, max_requests=w.max_requests)  # fmt: skip
    raise InputError(f"workload.kind: {w.kind} is not an open-loop workload")


def lane_trajectories(w, page: int, rng: np.random.Generator) -> Sequence[Trajectory]:
    """The trajectories a lane replay draws from: a Weka corpus, read again trajectory by trajectory as lanes
    draw them, or generated sessions (``kind: agentic``), held as page-key runs (a few ints a call)."""
    if w.kind == "lanes":
        return WekaCorpus(w.path, page_size=page, max_trajectories=w.num_dataset_entries)
    if w.synthesizer == "aiperf":
        from sim.workload.aiperf_synth import aiperf_trajectories

        return aiperf_trajectories(w.aiperf_config, w.sessions, int(rng.integers(2**31)), page)
    from sim.workload.agentic import generated_trajectories

    return generated_trajectories(w, rng, w.sessions, page)


def check_startable(sc: Scenario, progress: bool = False) -> int | None:
    """Raise the InputError a run of ``sc`` would raise while starting: the model's pools, the cost table,
    the workload as the run builds it (a trace's records, its simulated span, its smallest request against the
    empty pools), a top-k trace, a decode instance's model, the step-time backend. Runs nothing; returns the
    requests the run would serve where the workload says (None: a decode instance, or a run a duration ends);
    ``progress``: report a trace's read-through as it goes."""
    timeline = decode_timeline(sc)
    server = resolve(sc) if not timeline else None  # cap mode may leave no Full pool
    model = server.model if server is not None else build_model_spec(sc)
    if model.has_swa:
        check_v4_setup(model, page_tokens=sc.hicache.page_size, write_policy=sc.hicache.write_policy,
                       eviction_policy=sc.hicache.radix_eviction_policy)  # fmt: skip
    resolve_cost_table(sc.hardware.cost_table)
    if sc.compute.backend != "roofline":
        # compiles the estimator and asks it once: no kernel data is refused here (auto falls back instead)
        step_model(sc, resolve_cost_table(sc.hardware.cost_table).compute_params, expert_dtype(sc))
    if not timeline:
        return build(sc, server=server, progress=progress)[2]  # the workload as the run makes it (a trace read and checked, none held)
    from sim.hisparse.decode import decode_shape, decode_swa_ratio
    from sim.hisparse.dsadecode import dsa_layout_of
    from sim.hisparse.topk import load_topk_trace

    if dsa_layout_of(sc) is None:  # a DSA model has no SWA pool, and its shape comes from its config
        decode_swa_ratio(sc)
        decode_shape(sc.model.name, sc.compute.decode_bytes_per_step)
    if sc.hisparse.access.kind == "trace":
        load_topk_trace(sc.hisparse.access.trace_path)
    return None


def run_scenario(sc: Scenario, *, progress: bool = False, costs: CostTable | None = None,
                 requests_out: str | Path | None = None, keep_requests: bool = True,
                 notify: Notify | None = None) -> RunResult:  # fmt: skip
    """Run a scenario: a decode instance (``cluster.role: decode``) or colocated serving instances.

    ``requests_out`` streams the per-request records to that Parquet file as the run goes (the result's
    ``requests`` is then None); ``keep_requests=False`` keeps none (a sweep point needs only the summary).
    ``notify`` receives one-line notes for the user (a widened time series, a long run ahead).
    """
    import pandas as pd

    start = time.perf_counter()
    writer = RequestWriter(requests_out) if requests_out is not None else None
    agentx = sc.workload.kind in ("lanes", "agentic")  # its report reads every measured call's record
    rec = Recorder(record_requests=sc.output.record_requests and (keep_requests or writer is not None or agentx),
                   sink=writer)  # fmt: skip
    try:
        if decode_timeline(sc):
            result = _run_decode(sc, costs, start, rec, notify, progress)
            rec.flush()
        else:
            server = resolve(sc)
            sim, arrivals, n_requests = build(sc, costs, notify, server, progress)
            rec.samples = SampleBuffer(rows_per_tick=sim.cfg.instances)
            sim.rec = rec
            bar = _run_bar(sc, sim, n_requests, progress)
            try:
                sim.run(arrivals, bar if n_requests is not None else None)
                if n_requests is None:
                    advance_to(bar, sim.env.now, sim.env.now)  # the end is known now
            finally:
                bar.close()
            rec.flush()
            records = None
            if writer is not None and (sc.workload.kind in ("multi_turn", "bench_serving") or sim.client is not None):
                writer.close()  # the client report groups every record by round or step: read them back
                records = pd.read_parquet(requests_out, columns=list(clients.REPORT_COLUMNS))
            interval = _kept_interval(sim.cfg.sample_interval_s, rec.samples, notify)
            timeseries = rec.timeseries_frame(interval, sim.cfg.instances)
            result = RunResult(_with_interval(sc, interval), summarise(sc, sim, records, server),
                               time.perf_counter() - start, rec.requests_frame(), timeseries, sim)  # fmt: skip
    finally:
        if writer is not None:
            writer.close()
    if writer is not None:
        result.requests = None
    return result


def _run_bar(sc: Scenario, sim: Simulation, n_requests: int | None, enabled: bool):
    """A bar counting the requests that leave (finished or dropped); where the run decides how many (lanes: a
    duration ends it), the simulated seconds against the run's end as known so far
    (:meth:`~sim.serve.lanes.LanePlayer.planned_end_s`), moved at the sampler's ticks, not per request."""
    client = sim.client
    if n_requests is not None or client is None:
        return progress_bar(n_requests, desc=sc.name, unit="requests", enabled=enabled)
    bar = progress_bar(client.planned_end_s(), desc=sc.name, unit="simulated s", enabled=enabled)
    if enabled:
        sim.on_tick = lambda now: advance_to(bar, now, client.planned_end_s())
    return bar


def _run_decode(sc: Scenario, costs: CostTable | None, start: float, rec: Recorder,
                notify: Notify | None, progress: bool = False) -> RunResult:  # fmt: skip
    import pandas as pd

    from sim.hisparse.decode import run_decode

    costs = costs if costs is not None else resolve_cost_table(sc.hardware.cost_table)
    rng = np.random.default_rng(sc.seed)
    reqs, limits = _decode_requests(sc, rng)
    seen = survey(reqs, serial_seconds(Roofline.from_scenario(sc, costs.compute_params)))
    sc = _with_interval(sc, sample_interval(sc, seen, seen.last_arrival_s, notify))
    bar = progress_bar(len(reqs), desc=sc.name, unit="requests", enabled=progress)  # run_decode sets its total
    try:
        run = run_decode(sc, reqs, costs, rng, bar if progress else None, rec=rec, expert_dtype=expert_dtype(sc),
                         limits=limits)  # fmt: skip
    finally:
        bar.close()
    sc = _with_interval(sc, _kept_interval(sc.output.timeseries_interval_s, rec.samples, notify))
    run.summary["cost_table"] = cost_table_line(costs, sc)
    run.summary["cost_table_kind"] = costs.source.kind
    return RunResult(sc, run.summary, time.perf_counter() - start, rec.requests_frame(),
                     pd.DataFrame.from_records(list(rec.samples)),
                     tables={"misses": run.misses} if sc.hisparse.enabled else {})  # fmt: skip


def _decode_requests(sc: Scenario, rng: np.random.Generator) -> tuple[list, list[tuple[int, float | None]] | None]:
    """A decode timeline's requests: an open-loop workload's, or bench_serving's random prompts step after step,
    each with its step's ``--max-concurrency`` (a closed loop; all of them at once without one) and
    ``--request-rate``."""
    w = sc.workload
    if w.kind != "bench_serving":
        return open_loop_requests(sc, sc.hicache.page_size, rng), None
    reqs, limits = [], []
    for i, step in enumerate(w.steps):
        made = random_ids_requests(step.num_prompts, step.random_input_len, step.random_output_len,
                                   step.random_range_ratio, step.seed, sc.hicache.page_size, step=i,
                                   first_rid=len(reqs))  # fmt: skip
        reqs += [made.make(j) for j in range(len(made))]
        limits += [(step.max_concurrency or step.num_prompts, step.request_rate)] * len(made)
    return reqs, limits


def summarise(sc: Scenario, sim: Simulation, records: pd.DataFrame | None = None,
              server: ServerConfig | None = None) -> dict:  # fmt: skip
    """The run's summary of the server ``server`` (resolved from ``sc`` when not given). ``records`` are the
    per-request records for the client report when they were streamed to a file (else the recorder's own)."""
    rec, cfg = sim.rec, sim.cfg
    df = records if records is not None else rec.requests_frame()
    horizon = sim.env.now if cfg.duration_s is not None else (sim.end_s or sim.env.now)  # a capped run: the cap
    totals = rec.token_totals()
    metrics = _sglang_metrics(sim, totals)
    return {
        **_setup_summary(sc, sim, server if server is not None else resolve(sc, sim.cfg.model)),
        "simulated_s": horizon,
        **_served_summary(sim, totals, horizon),
        "metrics": metrics,
        "tier_ages": tierages.summary_section(sim.ages),
        **({"client": report} if (report := _client_report(sc, sim, df)) else {}),
    }


def _sglang_metrics(sim: Simulation, totals: dict) -> dict:
    """The caches' and the engine's counters under SGLang's metric names.

    Token figures come from the records, once: SGLang counts a request's cached tokens at its finish, from
    its first admission (metrics_collector.py:2114-2130); every prefill pass's tokens, a retracted request's
    re-prefills included, go to realtime_tokens_total (metrics_reporter.py:809-815). The cache's own count of
    what it computed, re-prefills and unfinished requests included, would say a third thing: left out."""
    metrics: dict = {}
    for inst in sim.instances:
        _merge(metrics, inst.cache.metrics())
    metrics.pop("sim_computed_tokens_total", None)
    metrics["cached_tokens_total"] = {t: totals[f"{t}_hit_tokens"] for t in ("device", "host", "storage")}
    hits = sum(metrics["cached_tokens_total"].values())
    metrics["realtime_tokens_total"] = {
        "prefill_compute": totals["computed_tokens"] + totals["reprocessed_computed_tokens"],
        "prefill_cache": hits + totals["reprocessed_cached_tokens"]}  # fmt: skip
    metrics.update(sim.rec.engine_metrics())
    metrics.update(sim.ages.metrics())
    return metrics


def _setup_summary(sc: Scenario, sim: Simulation, server: ServerConfig) -> dict:
    """What was simulated: the scenario, the model, the step-time source and the pools' capacities."""
    cfg = sim.cfg
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "model": cfg.model.name,
        "pools": len(cfg.model.pools),
        "instances": sc.cluster.instances,
        **({"dp_attention_ranks": cfg.dp_size} if cfg.dp_size > 1 else {}),  # each with its own pools (capacity_pages)
        **({"speculative": {"algorithm": sc.speculative.algorithm, "accept_length": sc.speculative.accept_length,
                            "num_draft_tokens": sc.speculative.draft_tokens}} if cfg.spec else {}),  # fmt: skip
        "cost_table": cost_table_line(sim.costs, sc),
        "cost_table_kind": sim.costs.source.kind,
        "compute": _compute_summary(sc, sim),
        "capacity_pages": {"l1": cfg.l1_pages, "l2": cfg.l2_pages, "page_tokens": cfg.page_tokens,
                           **_swa_pages(sc, sim),
                           **({"l3": cfg.l3_capacity_pages} if cfg.l3_enabled else {})},  # l3 None: unbounded
        "capacity_sources": server.capacity_sources,
        **({"capacity_mismatches": server.mismatches} if server.mismatches else {}),
        **({"pinned_host": pinned_summary(sc, server)} if cfg.l2_pages else {}),  # bytes: all ranks
        "server": server.settings(),
    }


def _served_summary(sim: Simulation, totals: dict, horizon: float) -> dict:
    """What was served over ``horizon``: requests, throughput, latencies, hit rates, links and engine counters."""
    rec, cfg = sim.rec, sim.cfg
    n_in = totals["input_tokens"] or 1
    dropped = dict(rec.dropped)
    unfinished = sim.arrived - rec.n_finished - sum(dropped.values())
    return {
        "requests": {"arrived": sim.arrived, "finished": rec.n_finished, "dropped": dropped,
                     "unfinished": unfinished},  # fmt: skip
        "throughput": {
            "requests_per_s": rec.n_finished / horizon if horizon else 0.0,
            "input_tokens_per_s": totals["input_tokens"] / horizon if horizon else 0.0,
            "output_tokens_per_s": totals["output_tokens"] / horizon if horizon else 0.0,
        },
        "ttft_s": percentiles(rec.ttft),
        "e2e_s": percentiles(rec.e2e),
        "queue_wait_s": percentiles(rec.queue_wait),
        "tokens": totals,
        "hit_rate": {
            "device": totals["device_hit_tokens"] / n_in,
            "host": totals["host_hit_tokens"] / n_in,
            "storage": totals["storage_hit_tokens"] / n_in,
            "total": (totals["device_hit_tokens"] + totals["host_hit_tokens"] + totals["storage_hit_tokens"]) / n_in,
        },
        "link_utilization": {link: rec.link_utilization(link, cfg.instances, horizon) for link in LINKS},
        "link_bytes": {link: rec.link_bytes(link) for link in LINKS},
        "engine": {
            "steps": rec.counters["steps"],
            "admission_stalls": rec.counters["admission_stalls"],
            "blocked_s": sum(i.blocked_s for i in sim.instances),
            "backup_flushes": rec.counters["backup_flushes"],
            **({"prefill_delayed_passes": rec.counters["prefill_delayed_passes"]} if cfg.enable_prefill_delayer else {}),
        },
    }


def _client_report(sc: Scenario, sim: Simulation, df: pd.DataFrame) -> dict | None:
    """The benchmark client's own report: bench_multiturn's, bench_serving's, or aiperf agentic's (AgentX)."""
    if sim.client is None:
        return clients.client_report(sc.workload, df)
    from sim.serve.lanes import agentx_report

    # an instance is tp_size GPUs whatever its attention-DP ranks (sim.cfg.instances counts the ranks)
    return agentx_report(df, sim.client, list(sim.rec.samples), gpus=sc.hardware.tp_size * sc.cluster.instances,
                         l1_pages=sim.cfg.l1_pages, page_tokens=sim.cfg.page_tokens)  # fmt: skip


def _compute_summary(sc: Scenario, sim: Simulation) -> dict:
    """What priced the passes, and what two-batch overlap took off them where it is on."""
    out = _pricer_summary(sc, sim)
    if sim.cfg.tbo_threshold is not None:
        groups = {id(i.group): i.group for i in sim.instances if i.group is not None}.values()
        priced = ("aiconfigurator-core's per-op times, collectives hidden behind the other micro-batch's compute"
                  if hasattr(sim.roofline, "tbo_parts") else
                  "spec-derived: the roofline has no communication term, so nothing to hide")  # fmt: skip
        out["two_batch_overlap"] = {"threshold": sim.cfg.tbo_threshold, "priced": priced,
                                    "passes": sum(g.tbo_passes for g in groups),
                                    "saved_s": sum(g.tbo_saved_s for g in groups)}  # fmt: skip
    return out


def _pricer_summary(sc: Scenario, sim: Simulation) -> dict:
    """The step-time backend: aiconfigurator-core's setup, or the roofline's efficiencies in effect and
    where each came from (scenario, fitted table, or estimate)."""
    r, fitted = sim.roofline, sim.costs.compute_params
    if r.name != "roofline":
        return r.describe()
    values = {"mfu": r.mfu, "mbu": r.mbu, "step_overhead_ms": r.overhead_s * 1e3, "attn_flops_scale": r.attn_scale}
    origin = {k: "scenario" if getattr(sc.compute, k) is not None else "fitted" if k in fitted else "spec-derived estimate"
              for k in values}  # fmt: skip
    # auto found no measured path (kernels, a transfer or a fit) for a named GPU: its roofline is a guess
    guessed = sc.hardware.gpu is not None and r.why.startswith("auto:") and "spec-derived estimate" in origin.values()
    return {"backend": "roofline", **values, "origin": origin, "chosen": r.why,
            "fit_source": sim.costs.compute.get("source") if fitted else None,
            **({"warning": UNMEASURED_ROOFLINE_WARNING.format(gpu=sc.hardware.gpu)} if guessed else {})}


def _merge(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value)
        elif isinstance(value, (int, float)) and value != float("inf"):
            into[key] = into.get(key, 0) + value
        else:
            into[key] = value


def write_outputs(result: RunResult, out_dir: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write a run's folder as a whole (staged, then renamed into place); returns the paths written.
    A non-empty ``out_dir`` is replaced only with ``overwrite`` (see :func:`sim.base.fileio.staged_dir`)."""
    with staged_dir(out_dir, overwrite=overwrite) as tmp:
        names = write_files(result, tmp)
    return [Path(out_dir) / n for n in names]


def write_files(result: RunResult, folder: Path) -> list[str]:
    """Write the outputs into ``folder`` (a staging folder); ``requests.parquet`` may be there already."""
    (folder / "summary.json").write_text(summary_json(result.summary))
    frames = {"timeseries": result.timeseries, **result.tables}
    if result.requests is not None:
        frames["requests"] = result.requests
    for name, df in frames.items():
        df.to_parquet(folder / f"{name}.parquet", index=False)
    (folder / "scenario.yaml").write_text(dump_resolved(result.scenario))
    names = ["summary.json", "requests.parquet", "timeseries.parquet", "scenario.yaml"]
    return names + [f"{n}.parquet" for n in sorted(result.tables)]


def summary_json(summary: dict) -> str:
    """Strict JSON (no NaN or Infinity tokens): an unbounded quantity is null; a NaN is a bug and raises."""
    return json.dumps(_strict(summary), indent=2, sort_keys=True, allow_nan=False) + "\n"


def _strict(value):
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    return value


def _swa_pages(sc: Scenario, sim: Simulation) -> dict:
    """The SWA pool of a windowed model's L1, as its cache was built, and how it was sized."""
    cache = sim.instances[0].cache
    if not sim.cfg.model.has_swa:
        return {}
    ratio = sc.hicache.swa_full_tokens_ratio
    host = {"l2_swa": int(cache.c.host_swa_cap // cache.page_tokens)} if 0 < cache.c.host_swa_cap < math.inf else {}
    return {"l1_swa": int(cache.c.swa_cap // cache.page_tokens), **host,
            "swa_sizing": "cap mode" if ratio == "cap" else f"ratio {ratio:g}"}


def compute_line(c: dict) -> str:
    """The printed line saying which backend priced the passes, and with what."""
    tbo = c.get("two_batch_overlap")
    if tbo is not None:
        c = {k: v for k, v in c.items() if k != "two_batch_overlap"}
        return (f"{compute_line(c)}\ntwo-batch overlap (threshold {tbo['threshold']:g}): {tbo['passes']:,} prefill "
                f"passes, {tbo['saved_s']:.3g} s taken off them ({tbo['priced']})")  # fmt: skip
    if c.get("backend") == "aiconfigurator":
        par = f"tp {c['tp_size']}" + (f" x attention-dp {c['attention_dp_size']}" if c["attention_dp_size"] > 1 else "")
        return (f"compute: aiconfigurator-core {c['aiconfigurator_core']} measured SGLang {c['sglang_version']} "
                f"kernels ({c['model']} on {c['system']}, {par}, ep {c['moe_ep_size']}, moe quant {c['moe_quant']}, "
                f"step overhead {c['step_overhead_ms']:g} ms; {c['shapes_priced']:,} shapes priced; ops "
                + ", ".join(f"{n} {src}" for src, n in c["op_sources"].items()) + ")"
                + (f"; {c['priced_as']}" if "priced_as" in c else "")
                + (f" <- {c['chosen']}" if c.get("chosen") else ""))  # fmt: skip
    origin = c.get("origin") or {}
    keys = origin or [k for k in c if k not in ("backend", "warning", "chosen")]
    return ("compute: roofline, " + ", ".join(f"{k} {c[k]:.3g}" + (f" ({origin[k]})" if k in origin else "")
                                              for k in keys)
            + (f" <- {c['chosen']}" if c.get("chosen") else "")
            + (f"\nwarning: {c['warning']}" if "warning" in c else ""))  # fmt: skip


def cost_table_line(costs: CostTable, sc: Scenario) -> str:
    """The cost table's line, flagged where its copy costs are another GPU's than the scenario's (the shipped
    table is an H200's: a B200 or B300 run prices its copies at H200 figures)."""
    gpu = sc.hardware.gpu_name
    line = costs.describe()
    if gpu and gpu.upper() not in costs.source.device.upper():
        line += f"; copies priced at {costs.source.device}'s figures, not {gpu}'s (calibrate a table on {gpu})"
    return line


def format_summary(result: RunResult) -> str:
    """The table ``hicache-sim run`` prints at the end."""
    s = result.summary
    if s.get("role") in ("decode", "colocated"):  # a decode timeline (HiSparse colocated too)
        return _format_decode(result)
    t, ttft, hr, lu = s["throughput"], s["ttft_s"], s["hit_rate"], s["link_utilization"]
    req = s["requests"]
    dropped = dropped_by_reason(s["metrics"])
    cap, m = s["capacity_pages"], s["metrics"]
    lines = [
        f"{s['scenario']}: {s['model']} ({plural(s['pools'], 'pool')}), {plural(s['instances'], 'instance')}, "
        + (f"{s['dp_attention_ranks']} DP-attention ranks each (pools per rank), " if "dp_attention_ranks" in s else "")
        + f"L1 {plural(cap['l1'], 'page')}, L2 {plural(cap['l2'], 'page')} of {cap['page_tokens']} tokens"
        + (f"; SWA pool {plural(cap['l1_swa'], 'page')} ({cap['swa_sizing']})" if "l1_swa" in cap else ""),
        *_capacity_lines(s),
        *_pinned_line(s.get("pinned_host")),
        f"cost table: {s['cost_table']}",
        compute_line(s["compute"]),
        *_server_lines(s["server"]),
        "",
        f"{'simulated time':<28}{s['simulated_s']:>14,.1f} s",
        f"{'requests':<28}{req['finished']:>14,} finished, {sum(req['dropped'].values())} dropped, "
        f"{req['unfinished']} unfinished",
        f"{'throughput':<28}{t['requests_per_s']:>14,.2f} req/s   (finished / simulated time)",
        f"{'input throughput':<28}{t['input_tokens_per_s']:>14,.0f} tok/s",
        f"{'output throughput':<28}{t['output_tokens_per_s']:>14,.0f} tok/s",
        f"{'TTFT mean / p50 / p90 / p99':<28}{ttft['mean']:>14.3f} / {ttft['p50']:.3f} / {ttft['p90']:.3f} / "
        f"{ttft['p99']:.3f} s   (every request of the run, warm-up included; percentiles interpolated)",
        _hit_line(hr, tiers=["device", *(["host"] if cap["l2"] else []), *(["storage"] if "l3" in cap else [])]),
        *_retraction_lines(s),
        *([f"{'dropped tokens':<28}{sum(dropped.values()):>14,}" + "".join(f"  {k}={v:,}" for k, v in sorted(dropped.items())),
           f"{'link busy h2d / d2h':<28}{lu['h2d']:>13.1%} / {lu['d2h']:.1%}"
           + (f"   L3 read / write {lu['l3_read']:.1%} / {lu['l3_write']:.1%}" if lu["l3_read"] or lu["l3_write"] else "")]
          if cap["l2"] or dropped or any(lu.values()) else []),  # HiCache off: no host tier to drop to or copy over
        f"{'admission stalls':<28}{s['engine']['admission_stalls']:>14,}  ({s['engine']['blocked_s']:.1f} s blocked)",
        *_l3_and_write_back_lines(m),
        *(tierages.format_lines(s["tier_ages"]) if "tier_ages" in s else []),
        "",
        *([clients.format_client_report(s["client"]), ""] if s.get("client") else []),
        f"wall time {result.wall_s:.2f} s",
    ]  # fmt: skip
    return "\n".join(lines)


def _capacity_lines(s: dict) -> list[str]:
    """Which capacities came from the server's log (or a cap), and where the derivation misses them; nothing
    when all are derived."""
    src = s.get("capacity_sources", {})
    given = {k: v for k, v in src.items() if "logged" in v or "capped" in v or v.startswith("hicache.host")}
    if not given:  # a mismatch needs a logged capacity
        return []
    return ["capacities: " + ", ".join(f"{k} from {v}" for k, v in given.items()),
            *(f"  note: {m}" for m in s.get("capacity_mismatches", []))]


def _pinned_line(p: dict | None) -> list[str]:
    """The pinned host pools against the pinnable ceiling, where one applies (``hardware.pinnable_gb`` or ROCm's
    rule); nothing where DRAM alone bounds them."""
    if not p or p["pinnable_gb"] is None:
        return []
    return [f"pinned host pools {p['bytes'] / 1e9:,.1f} GB of {p['pinnable_gb']:,.1f} GB pinnable <- {p['source']}"]
def _server_lines(server: dict) -> list[str]:
    """The resolved budgets, precisions and step-time backend, each with its source (``ServerConfig.settings``)."""
    return [f"{head}: " + "; ".join(f"{label} {text}".lstrip() for label, text in rows)
            for head, rows in setting_rows(server).items()]  # fmt: skip


def _hit_line(hr: dict, tiers: list[str]) -> str:
    """Hit rates of the tiers the run has (no host column without HiCache, no L3 column without L3)."""
    names = {"device": "device", "host": "host", "storage": "L3"}
    head = f"hit rate {' / '.join(names[t] for t in tiers)}"
    first, *rest = (f"{hr[t]:.1%}" for t in tiers)
    if not rest:
        return f"{head:<28}{first:>14}   (of input tokens, at first admission)"
    return (f"{head:<28}{first:>13} / {' / '.join(rest)}   (total {hr['total']:.1%} of input tokens, "
            "at first admission)")


def _retraction_lines(s: dict) -> list[str]:
    """Retracted requests (SGLang's ``num_retracted_requests_total``) and what their re-prefills ran again."""
    m, tok = s["metrics"], s["tokens"]
    n = m.get("num_retracted_requests_total", 0)
    if not n:
        return [f"{'retractions':<28}{0:>14}"]
    again = tok["reprocessed_computed_tokens"] + tok["reprocessed_cached_tokens"]
    return [f"{'retractions':<28}{n:>14,}   ({again:,} tokens re-prefilled: {tok['reprocessed_computed_tokens']:,} "
            f"computed, {tok['reprocessed_cached_tokens']:,} cached; no hits)"]


def _l3_and_write_back_lines(m: dict) -> list[str]:
    """Summary lines for L3 reads and write_back waits, when there were any."""
    lines = []
    if m.get("sim_prefetches_total"):
        cut = sum(m["storage_prefetch_unfulfilled_tokens_total"].values())
        lines.append(f"{'L3 reads':<28}{m['sim_prefetches_total']:>14,}  ({m['prefetched_tokens_total']:,} tokens "
                     f"landed, {cut:,} not; {m['sim_prefetch_retries_total']:,} lookups retried)")  # fmt: skip
    if m.get("sim_write_back_wait_seconds_total"):
        lines.append(f"{'write_back copy waits':<28}{m['sim_write_back_wait_seconds_total']:>14.2f} s")
    return lines


def _dsa_lines(h: dict) -> list[str]:
    """A DSA model's sizing: the logical tokens each pool admits against, the host mirror each rank pins."""
    t = h["logical_tokens"]
    return [f"{'KV tokens (capacity gain)':<30}{t['hisparse']:>14,}   (off {t['baseline']:,}: "
            f"{h['capacity_gain']:.2f}x at host_to_device_ratio {h['host_to_device_ratio']}; {h['kv_dtype']} KV, "
            f"{h['anchor_layers']} anchor + {h['skip_layers']} shared-index layers)",
            f"{'host pool per rank':<30}{h['host_pool_bytes_per_rank'] / 1e9:>14,.1f} GB   "
            f"({h['host_pool_tokens_per_rank']:,} tokens; pinned on every TP rank, MLA KV replicated)"]  # fmt: skip


def _format_decode(result: RunResult) -> str:
    s = result.summary
    h, req, tpot = s["hisparse"], s["requests"], s["tpot_s"]
    dsa = h.get("family") == "dsa"
    rows = "slots" if dsa else "C4 slots"
    mode = (f"HiSparse on ({h['policy']}, {h['device_buffer_size']} {rows}, top-k {h['top_k']})"
            if h["enabled"] else f"HiSparse off (all {'' if dsa else 'C4 '}KV on the GPU)")  # fmt: skip
    lines = [
        f"{s['scenario']}: {s['model']} decode instance, {mode}",
        f"cost table: {s['cost_table']}",
        compute_line(s["compute"]),
        "",
        f"{'simulated time':<30}{s['simulated_s']:>14,.1f} s",
        f"{'requests':<30}{req['finished']:>14,} finished, {sum(req['dropped'].values())} dropped, "
        f"{req['unfinished']} unfinished",
        f"{'GPU bytes per request':<30}{h['bytes_per_request'] / 1e6:>14,.0f} MB   "
        f"(off {h['bytes_per_request_baseline'] / 1e6:,.0f} MB, on {h['bytes_per_request_hisparse'] / 1e6:,.0f} MB)",
        f"{'max decode batch':<30}{h['max_batch']:>14,}   (off {h['max_batch_baseline']}, on "
        f"{h['max_batch_hisparse']}: {h['batch_gain']:.2f}x; capped by {h['batch_limit']})",
        *(_dsa_lines(h) if dsa else []),
        f"{'peak batch reached':<30}{h['peak_batch']:>14,}",
        f"{'output throughput':<30}{s['throughput']['output_tokens_per_s']:>14,.0f} tok/s",
        f"{'TPOT mean / p90':<30}{tpot['mean'] * 1e3:>14.1f} / {tpot['p90'] * 1e3:.1f} ms",
        *([f"{'misses per step (req, layer)':<30}{h['misses_per_step']:>14.1f}   miss rate {h['miss_rate']:.1%}, "
           f"swap-in {h['swap_in_share']:.1%} of step time",
           f"{'HiSparse pays from batch':<30}{h['break_even_batch'] or 'never':>14}   (its tok/s reach the "
           f"baseline's at {h['max_batch_baseline']}: roofline, these misses, the cost table)"] if h["enabled"] else []),
        "",
        f"wall time {result.wall_s:.2f} s",
    ]  # fmt: skip
    return "\n".join(lines)
