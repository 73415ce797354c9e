"""The benchmark clients SGLang users run, as SimPy arrival processes, and reports that read like theirs.

- ``bench_multiturn`` (``benchmark/hicache/bench_multiturn.py``): a ready queue of clients; the sender pops
  one (random or FIFO) while fewer than ``max_parallel`` are in flight, then sleeps one inter-arrival gap
  whether or not one was ready, and polls every 50 ms at the limit. A finished round puts the client's next
  round in the ready queue (with the round barrier: after every client in the round finished it, and the
  client's pause).
- ``bench_serving`` (``sglang/benchmark/serving.py``): steps run back to back; each may wait for the backups to
  land, ``/flush_cache`` (L1 and L2; L3 kept), then send its prompts at ``request_rate`` (inf: all at once)
  under a ``max_concurrency`` semaphore. TTFT counts from the send, after the semaphore, as the client does.

Randomness goes through the simulation's one generator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.workload.request import Request
from sim.workload.synthetic import MultiTurnRequests

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["bench_multiturn", "bench_serving", "client_report", "format_client_report", "rank_quantile"]

POLL_S = 0.05  # bench_multiturn's sleep while max_parallel requests are in flight
FLUSH_POLL_S = 0.01


def bench_multiturn(sim, convos: MultiTurnRequests, w):
    """The arrival process of bench_multiturn over ``convos`` (``w``: a MultiTurnWorkload); each round is
    made when it is sent."""
    env, rng, rounds = sim.env, sim.rng, convos.rounds
    ready: list[int] = list(range(len(rounds)))
    held: dict[int, list[int]] = {}  # round barrier: clients whose next round waits for round r to end
    done_in_round: dict[int, int] = {}
    next_round = [0] * len(rounds)
    # Clients taking part in each round (they may run different numbers of rounds: --min/--max-rounds).
    in_round = [sum(n > r for n in rounds) for r in range(max(rounds, default=0))]
    state = {"in_flight": 0, "left": len(convos)}
    wake = [env.event()]

    def finished(req: Request) -> None:
        state["in_flight"] -= 1
        state["left"] -= 1
        c = req.session
        if c >= 0 and next_round[c] < rounds[c]:
            if w.round_barrier:
                held.setdefault(req.round, []).append(c)
            else:
                ready.append(c)
        if w.round_barrier:
            done_in_round[req.round] = done_in_round.get(req.round, 0) + 1
            if done_in_round[req.round] == in_round[req.round]:
                release = held.pop(req.round, [])
                if w.round_barrier_pause_s:
                    env.timeout(w.round_barrier_pause_s).callbacks.append(lambda _e: (ready.extend(release), wakeup()))
                else:
                    ready.extend(release)
        wakeup()

    def wakeup() -> None:
        if not wake[0].triggered:
            wake[0].succeed()

    sim.on_finish = finished
    rate = w.request_rate
    while state["left"] > 0:
        if state["in_flight"] >= w.max_parallel:
            yield env.timeout(POLL_S) if rate else wake[0]
            wake[0] = env.event() if wake[0].triggered else wake[0]
            continue
        if ready:
            client = ready.pop(int(rng.integers(len(ready))) if w.ready_queue_policy == "random" else 0)
            req = convos.request(client, next_round[client])
            next_round[client] += 1
            req.arrival_s = env.now
            state["in_flight"] += 1
            sim.dispatch(req)
        elif not rate:  # closed loop: nothing to do until a request finishes
            yield wake[0]
            wake[0] = env.event()
            continue
        if rate:
            gap = rng.exponential(1.0 / rate) if w.distribution == "poisson" else rng.uniform(0, 2.0 / rate)
            yield env.timeout(gap)


def bench_serving(sim, steps: list[tuple[object, list[Request]]]):
    """The arrival process of bench_serving: ``steps`` pairs each ServingStep with its requests."""
    env, rng = sim.env, sim.rng
    state = {"in_flight": 0}
    wake = [env.event()]

    def finished(_req: Request) -> None:
        state["in_flight"] -= 1
        if not wake[0].triggered:
            wake[0].succeed()

    sim.on_finish = finished
    for step, reqs in steps:
        if step.flush_cache or step.wait_backups:
            while not all(i.quiescent for i in sim.instances) or (
                step.wait_backups and any(lk.free_at > env.now for i in sim.instances for lk in i.links.values())
            ):
                yield env.timeout(FLUSH_POLL_S)
        if step.flush_cache:
            for inst in sim.instances:
                inst.flush_cache()
        limit = step.max_concurrency or len(reqs)
        for req in reqs:
            while state["in_flight"] >= limit:
                yield wake[0]
                wake[0] = env.event()
            req.arrival_s = env.now
            state["in_flight"] += 1
            sim.dispatch(req)
            if step.request_rate:
                yield env.timeout(rng.exponential(1.0 / step.request_rate))
        while state["in_flight"]:
            yield wake[0]
            wake[0] = env.event()


# ----- reports ---------------------------------------------------------------------------------------------
def rank_quantile(values: np.ndarray, q: float) -> float:
    """bench_multiturn's percentile: the value at rank ``int(q n)`` of the sorted values, not interpolated."""
    return float(np.sort(values)[int(q * len(values))])


def _ms(values: pd.Series) -> dict[str, float]:
    a = values.to_numpy(dtype=float) * 1e3
    if not len(a):
        return {"mean": 0.0, "median": 0.0, "p99": 0.0}
    return {"mean": float(a.mean()), "median": float(np.median(a)), "p99": float(np.percentile(a, 99))}


def _hit_rate(df: pd.DataFrame) -> float:
    hits = df["device_hit_tokens"] + df["host_hit_tokens"] + df["storage_hit_tokens"]
    return float(hits.sum() / max(1, df["input_tokens"].sum()))


REPORT_COLUMNS = ("round", "arrival_s", "finish_s", "ttft_s", "e2e_s", "input_tokens", "output_tokens",
                  "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens")  # what client_report reads


def client_report(workload, df: pd.DataFrame) -> dict | None:
    """Per-step (bench_serving) or per-round (bench_multiturn) figures from the per-request records."""
    if df.empty or workload.kind not in ("bench_serving", "multi_turn"):
        return None
    rows = []
    for key, g in df.groupby("round", sort=True):
        key = int(key)
        if workload.kind == "multi_turn":
            ttft = g["ttft_s"].to_numpy(dtype=float)
            rows.append({"round": key, "requests": len(g), "ttft_mean_s": float(ttft.mean()),
                         "ttft_p90_s": rank_quantile(ttft, 0.9), "hit_rate": _hit_rate(g)})  # fmt: skip
            continue
        step = workload.steps[key]
        duration = float(g["finish_s"].max() - g["arrival_s"].min())
        n_in, n_out = int(g["input_tokens"].sum()), int(g["output_tokens"].sum())
        decode = g[g["output_tokens"] > 1]
        tpot = (decode["e2e_s"] - decode["ttft_s"]) / (decode["output_tokens"] - 1)
        rows.append({
            "step": key, "label": step.label or f"step {key}", "max_concurrency": step.max_concurrency,
            "completed": len(g), "duration_s": duration, "input_tokens": n_in, "output_tokens": n_out,
            "request_throughput": len(g) / duration if duration else 0.0,
            "input_throughput": n_in / duration if duration else 0.0,
            "output_throughput": n_out / duration if duration else 0.0,
            "total_throughput": (n_in + n_out) / duration if duration else 0.0,
            "ttft_ms": _ms(g["ttft_s"]), "tpot_ms": _ms(tpot), "e2e_ms": _ms(g["e2e_s"]),
            "cache_hit_rate": _hit_rate(g),
            "cached_tokens": {"device": int(g["device_hit_tokens"].sum()), "host": int(g["host_hit_tokens"].sum()),
                              "storage": int(g["storage_hit_tokens"].sum())},
        })  # fmt: skip
    if workload.kind == "multi_turn":
        ttft, lat = np.sort(df["ttft_s"].to_numpy(float)), np.sort(df["e2e_s"].to_numpy(float))  # (means in this order)
        span = float(df["finish_s"].max() - df["arrival_s"].min())
        summary = {"total_requests": len(ttft), "average_ttft": float(ttft.mean()),
                   "p90_ttft": rank_quantile(ttft, 0.9), "median_ttft": rank_quantile(ttft, 0.5),
                   "average_latency": float(lat.mean()), "p90_latency": rank_quantile(lat, 0.9),
                   "median_latency": rank_quantile(lat, 0.5), "throughput": len(ttft) / span if span else 0.0}  # fmt: skip
        return {"client": "bench_multiturn", "summary": summary, "rounds": rows}
    return {"client": "bench_serving", "steps": rows}


def format_client_report(report: dict | None) -> str:
    """The client's own view: bench_multiturn's summary and a per-round table, or bench_serving per step."""
    if not report:
        return ""
    if report["client"] == "aiperf_agentic":
        from sim.serve.lanes import format_agentx_report

        return format_agentx_report(report)
    if report["client"] == "bench_multiturn":
        s = report["summary"]
        lines = ["bench_multiturn summary, as the client computes it",
                 "  (P90 and median: the values at rank 0.9 n and n / 2, not interpolated; "
                 "throughput: requests / (last finish - first send)):",
                 f"  Total requests: {s['total_requests']}",
                 f"  Average TTFT: {s['average_ttft']:.2f} s   P90 TTFT: {s['p90_ttft']:.2f} s   "
                 f"Median TTFT: {s['median_ttft']:.2f} s",
                 f"  Average latency: {s['average_latency']:.2f} s   P90 latency: {s['p90_latency']:.2f} s   "
                 f"Median latency: {s['median_latency']:.2f} s",
                 f"  Throughput: {s['throughput']:.2f} requests per second",
                 f"  {'round':>5} {'requests':>9} {'TTFT mean s':>12} {'TTFT p90 s':>11} {'hit rate':>9}"]  # fmt: skip
        lines += [f"  {r['round']:>5} {r['requests']:>9} {r['ttft_mean_s']:>12.3f} {r['ttft_p90_s']:>11.3f} "
                  f"{r['hit_rate']:>9.1%}" for r in report["rounds"]]  # fmt: skip
        return "\n".join(lines)
    width = max(4, *(len(r["label"]) for r in report["steps"])) + 1
    lines = ["bench_serving steps, as the client computes them (duration: first send to last finish):",
             f"  {'step':<{width}}{'conc':>5}{'done':>6}{'dur s':>8}{'in tok/s':>10}{'total tok/s':>12}"
             f"{'TTFT mean/p99 ms':>20}{'TPOT ms':>9}{'hit':>7}"]  # fmt: skip
    for r in report["steps"]:
        t = r["ttft_ms"]
        lines.append(f"  {r['label']:<{width}}{r['max_concurrency'] or '-':>5}{r['completed']:>6}{r['duration_s']:>8.1f}"
                     f"{r['input_throughput']:>10,.0f}{r['total_throughput']:>12,.0f}"
                     f"{t['mean']:>11,.0f} / {t['p99']:>6,.0f}{r['tpot_ms']['mean']:>9.1f}{r['cache_hit_rate']:>7.1%}")  # fmt: skip
    return "\n".join(lines)
