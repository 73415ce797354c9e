"""``hicache-sim score``: hold the simulator against a measured run, figure by figure.

The measured files (:mod:`sim.interop.measured`) are checked against the scenario first (the model, the
concurrency of each step or of the lanes: a file of another run is refused in one line, before any run), then
the scenario runs once per seed and each figure the measurement has is set beside the simulated mean and its
95% interval (:mod:`sim.app.seeds`). A per-request export (aiperf's ``profile_export.jsonl``) is replayed as the
run went: each request at its recorded start, with its recorded input and output lengths, and the turns of one
conversation sharing their prefix (a turn's prompt holds the turns before it), so the comparison is request for
request; the recorded starts make it an open-loop replay of a closed-loop run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sim.base.errors import InputError
from sim.interop.measured import Measured, MeasuredRequest, Where, part_of

__all__ = ["check_against", "replay_source", "replay_trace", "scenario_concurrency", "simulate", "simulated_figures"]


def _step_figures(step: dict) -> dict[str, float]:
    ms = {"ttft_mean_s": step["ttft_ms"]["mean"], "ttft_p50_s": step["ttft_ms"]["median"],
          "ttft_p99_s": step["ttft_ms"]["p99"], "tpot_mean_s": step["tpot_ms"]["mean"],
          "e2e_mean_s": step["e2e_ms"]["mean"]}  # fmt: skip
    out = {k: v * 1e-3 for k, v in ms.items()}
    done, prompt = step["completed"], step["input_tokens"]
    out.update({"input_tokens_per_s": step["input_throughput"], "output_tokens_per_s": step["output_throughput"],
                "total_tokens_per_s": step["total_throughput"], "requests_per_s": step["request_throughput"],
                "duration_s": step["duration_s"], "hit_total": step["cache_hit_rate"],
                "isl_mean": prompt / done if done else math.nan, "osl_mean": step["output_tokens"] / done if done else math.nan,
                **{f"hit_{t}": n / prompt if prompt else 0.0 for t, n in step["cached_tokens"].items()}})  # fmt: skip
    return out


def _client_figures(client: dict) -> dict[str, float]:
    """The figures the client's own report gives (per step, per round, AgentX's measured phase)."""
    out: dict[str, float] = {}
    if client.get("client") == "bench_serving":
        for step in client["steps"]:
            out.update({f"step{step['step']}.{k}": v for k, v in _step_figures(step).items()})
    elif client.get("client") == "bench_multiturn":
        s = client["summary"]
        out.update({"ttft_mean_s": s["average_ttft"], "ttft_p90_s": s["p90_ttft"], "ttft_p50_s": s["median_ttft"],
                    "e2e_mean_s": s["average_latency"], "requests_per_s": s["throughput"]})  # fmt: skip
        for r in client["rounds"]:  # bench_multiturn counts rounds from 0, as its log's round_N
            out.update({f"round{r['round']}.ttft_mean_s": r["ttft_mean_s"], f"round{r['round']}.hit_total": r["hit_rate"]})
    elif client.get("client") == "aiperf_agentic" and "duration_s" in client:
        itl = client["itl_s"]
        out.update({"tok_per_s_per_gpu": client["tok_per_s_per_gpu"], "ttft_mean_s": client["ttft_s"]["mean"],
                    "ttft_p50_s": client["ttft_s"]["p50"], "ttft_p90_s": client["ttft_s"]["p90"],
                    "tpot_mean_s": itl["mean"], "tpot_p90_s": itl["p90"],
                    "tok_per_s_per_user": 1 / itl["mean"] if itl["mean"] else math.nan,
                    "hit_total": client["prefix_hit"], "hit_device": client["gpu_hit"], "hit_host": client["cpu_hit"],
                    "hit_storage": client["storage_hit"], "token_usage": client["full_token_usage"]["mean"],
                    "calls_per_lane_hour": client["requests"] / client["lanes"] / (client["duration_s"] / 3600)})  # fmt: skip
    return out


def simulated_figures(sc, per_request: bool = False) -> dict:
    """One seed's figures under the names :mod:`sim.interop.measured` gives measured ones (a worker's body);
    ``per_request``: also each request's TTFT in trace order (``request_ttft_s``; NaN for one unfinished)."""
    from sim.app.run import run_scenario
    from sim.app.sweep import flat_metrics
    from sim.serve.metrics import percentiles

    result = run_scenario(sc)
    s = result.summary
    flat = flat_metrics(s)
    out = {k: flat[k] for k in ("input_tokens_per_s", "output_tokens_per_s", "requests_per_s", "ttft_mean_s",
                                "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "hit_device", "hit_host", "hit_storage",
                                "hit_total")}  # fmt: skip
    done = s["requests"]["finished"]
    out.update(total_tokens_per_s=out["input_tokens_per_s"] + out["output_tokens_per_s"],
               e2e_mean_s=s["e2e_s"]["mean"], isl_mean=s["tokens"]["input_tokens"] / done if done else math.nan,
               osl_mean=s["tokens"]["output_tokens"] / done if done else math.nan)  # fmt: skip
    if result.sim is not None:
        tpot = percentiles(result.sim.rec.tpot)
        out.update(tpot_mean_s=tpot["mean"], tpot_p90_s=tpot["p90"])
        if tpot["mean"]:  # InferenceX's interactivity: 1 / mean ITL (request_metrics.py, _interactivity_stats)
            out["tok_per_s_per_user"] = 1 / tpot["mean"]
    ts = result.timeseries
    if ts is not None and not ts.empty:
        per_time = ts.groupby("time_s")[["waiting", "running"]].sum()
        out.update(queue_mean=float(per_time["waiting"].mean()), running_mean=float(per_time["running"].mean()))
    out.update(_client_figures(s.get("client") or {}))
    if per_request and result.requests is not None:
        ttft = result.requests.set_index("rid")["ttft_s"]
        out["request_ttft_s"] = [float(ttft.get(i, math.nan)) for i in range(s["requests"]["arrived"])]
    return out


def simulate(sc, seeds: list[int], *, workers: int | None, progress: bool, per_request: bool = False) -> pd.DataFrame:
    """One row of figures a seed (a seed that fails is an error naming it: its row would bias the interval);
    with ``per_request``, each seed's per-request TTFTs in ``attrs["request_ttft_s"]``."""
    from sim.app.parallel import run_calls
    from sim.app.seeds import with_seed

    outcomes = run_calls([(simulated_figures, (with_seed(sc, s), per_request)) for s in seeds], workers=workers,
                         progress=progress, desc=f"{sc.name} x {len(seeds)} seeds")  # fmt: skip
    rows, per_req = [], []
    for seed, outcome in zip(seeds, outcomes):
        if outcome["status"] != "ok":
            raise InputError(f"seed {seed}: {outcome['error']}")
        per_req.append(outcome["value"].pop("request_ttft_s", None))
        rows.append({"seed": seed, **outcome["value"]})
    df = pd.DataFrame(rows)
    if per_request:
        df.attrs["request_ttft_s"] = per_req
    return df


def _base_name(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def scenario_concurrency(sc, part: str) -> tuple[int | None, str]:
    """The concurrency the scenario runs ``part`` at (None: no cap) and the field that sets it."""
    w = sc.workload
    if part.startswith("step"):
        if w.kind != "bench_serving":
            raise ValueError(f"a bench_serving result, but the scenario's workload is {w.kind}")
        i = int(part[4:])
        if i >= len(w.steps):
            raise ValueError(f"run {i + 1} of the file, but the scenario has {len(w.steps)} bench_serving step(s)")
        return w.steps[i].max_concurrency, f"workload.steps[{i}].max_concurrency"
    if w.kind in ("lanes", "agentic"):
        return w.lanes, "workload.lanes"
    if w.kind == "bench_serving" and len(w.steps) == 1:
        return w.steps[0].max_concurrency, "workload.steps[0].max_concurrency"
    if w.kind == "multi_turn":  # bench_multiturn's in-flight cap (--max-parallel)
        return w.max_parallel, "workload.max_parallel"
    return None, "workload"


def _part_problem(sc, part: str) -> str | None:
    """Why the scenario has no such part (a step past its steps, a round of a workload without rounds)."""
    w = sc.workload
    if part.startswith("step"):
        return _scenario_concurrency_problem(sc, part)
    if part.startswith("round"):
        if w.kind != "multi_turn":
            return f"a bench_multiturn round, but the scenario's workload is {w.kind}"
        rounds = max(w.num_rounds, w.max_rounds)
        if int(part[5:]) >= rounds:
            return f"round_{part[5:]}, but the scenario runs {rounds} rounds"
    return None


def _scenario_concurrency_problem(sc, part: str) -> str | None:
    try:
        scenario_concurrency(sc, part)
    except ValueError as exc:
        return str(exc)
    return None


def check_against(runs: list[Measured], sc) -> None:
    """Refuse a measured file of another run: another model, parts the scenario does not have (steps, rounds),
    or a concurrency other than the scenario's."""
    names = {_base_name(sc.model.name), _base_name(sc.model.config or "")}
    for m in runs:
        if m.model is not None and _base_name(m.model[0]) not in names:
            raise m.model[1].error(f"{m.model[0]!r}, but the scenario runs {sc.model.name}")
        for part in sorted({part_of(f) for f in m.figures} - {""} - set(m.concurrency)):
            if (problem := _part_problem(sc, part)) is not None:
                raise Where(m.source, part.replace("round", "round.round_") if part.startswith("round") else part
                            ).error(problem)  # fmt: skip
        for part, (value, where) in m.concurrency.items():
            try:
                expected, field = scenario_concurrency(sc, part)
            except ValueError as exc:
                raise where.error(str(exc)) from None
            if expected is not None and expected != value:
                raise where.error(f"{value}, but the scenario runs {field} = {expected}")


def replay_trace(requests: list[MeasuredRequest], path: Path, block: int) -> None:
    """The requests as a Mooncake trace (``timestamp`` ms, lengths, ``hash_ids`` one a ``block`` tokens): a
    conversation's turns share one run of block ids, so a later turn finds the earlier turn's prefix cached
    as far as the server kept it; a request without a conversation shares nothing."""
    lines, bases = [], {}
    for i, r in enumerate(requests):
        key = r.conversation if r.conversation is not None else f"\0{i}"  # no conversation: a run of its own
        base = bases.setdefault(key, (len(bases) + 1) << 24)  # room for any prompt (at most 2^24 blocks)
        ids = list(range(base, base + math.ceil(r.input_tokens / block)))
        lines.append(json.dumps({"timestamp": round(r.start_s * 1e3, 3), "input_length": r.input_tokens,
                                 "output_length": max(1, r.output_tokens), "hash_ids": ids}))  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def replay_source(runs: list[Measured]) -> Measured | None:
    """The one per-request export to replay (None: none); two are ambiguous."""
    with_requests = [m for m in runs if m.requests]
    if len(with_requests) > 1:
        raise Where(with_requests[1].source, "metadata").error("a second per-request export: replay one run at a time")
    return with_requests[0] if with_requests else None

