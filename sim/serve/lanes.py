"""Lane replay of agentic trajectories as aiperf plays them for InferenceX's AgentX, and AgentX's report.

aiperf's agentic replay (``docs/benchmark-modes/semianalysis-agentx-faq.md`` §2, §4-§6; the Weka loader
``src/aiperf/dataset/loader/weka_trace.py``):

- ``--concurrency C`` is C *lanes*, each holding one trajectory tree (the parent and its subagents) at a
  time; when the whole tree has drained, the lane draws the next trajectory (sequentially through the
  dataset) and replays it from its first call, as a new session whose cache keys are its own
  (``--cache-bust``: sessions never share a prefix, a session and its subagents do).
- A call is sent when the previous call of its chain has finished plus the recorded idle gap, measured end
  to start (``t_k - t_{k-1} - api_time_{k-1}``, at least 0). ``--trace-idle-gap-cap-seconds`` caps it as aiperf
  does, on the trajectory's timeline: a gap between two request starts longer than the cap loses its excess
  (:mod:`sim.workload.idlegap`).
- A subagent group is spawned at its recorded gap after the parent call before it and runs as a chain of its
  own, concurrently with the parent and with other groups; the parent's first later call recorded after the
  group ended waits for it (the join), then for the recorded gap after the group's end.
- Each lane's first trajectory starts at a point t* drawn uniformly between ``trajectory_start_min_ratio``
  and ``..._max_ratio`` of its recorded span, so lanes are out of phase. The warm-up is aiperf's: the parent call
  just before t* primes the cache (the snapshot primer; the primers are spread so that every lane's t* would land
  at one instant, the one recorded furthest before its t* first), then ``warmup_requests_per_lane`` more parent calls
  carry the trajectory on past t* back to back, with no idle wait (InferenceX's aiperf,
  ``benchmarks/benchmark_lib.sh`` ``build_replay_cmd``), at most all but one of its remaining parent calls, and
  every warm-up call asks for one output token (aiperf ``timing/strategies/agentic_replay.py:84, 1703-1707``:
  ``max_tokens`` 1 in the warm-up phase). None is measured; subagent groups spawned before the measured phase
  are not replayed (a simplification). When every lane has warmed, the measured phase starts and each lane
  goes on from where its warm-up left it: after the primer alone, at its recorded offset from t*; after more,
  at the recorded gap after the last warm-up call. Later trajectories start from their first call.
- With ``warmup_grace_period_s`` set (aiperf's ``--agentic-warmup-grace-period``, or ``--warmup-grace-period``
  under ``--scenario``: ``config/flags/_converter_profiling.py:78-87``), warm-up calls still in flight that long
  after the warm-up began are cancelled, and a cancelled warm-up call aborts the run
  (``timing/phase/runner.py:1157-1175``, ``credit/callback_handler.py:334-351``): the replay ends there with
  ``warmup_failed`` in the report and no measured phase. The grace counts from time 0, when the warm-up begins.
- After ``benchmark_duration_s`` of the measured phase no new call is sent; calls in flight have
  ``benchmark_grace_period_s`` more to finish (aiperf's ``--benchmark-grace-period``, 30 s by default; null
  waits for all), and the run ends when the last of them finishes or the grace period does: a call still
  running then is left unfinished and out of the report. A lane whose next call would go after the end stops
  at once rather than sitting out its idle gap, so no think time past the end counts in the run's span.

The report follows InferenceX's ``utils/process_agentic_result.py``: throughput is (sum of input + output
tokens) / (last finish - first start) of the measured calls, divided by the GPUs; ITL is each call's
(end - first token) / (output tokens - 1) and percentiles interpolate linearly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.workload.idlegap import capped_timeline
from sim.workload.request import Request
from sim.workload.trajectory import Call, Subagent, Trajectory, end_to_start

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LanePlayer", "agentx_report", "format_agentx_report"]


class _Start(NamedTuple):
    """A lane's first trajectory: the recorded time its first measured step's gap counts from, that step, the
    warm-up calls (the primer first) and the primer's lead before t* (None: nothing to warm)."""

    t_ref: float
    step: int
    warm: list[Call]
    lead: float | None


class LanePlayer:
    """The arrival process of a lane replay (``w``: a LanesWorkload or AgenticWorkload)."""

    def __init__(self, sim, trajectories: Sequence[Trajectory], w) -> None:
        self.sim, self.env, self.trajs, self.w = sim, sim.env, trajectories, w
        self.cap = w.idle_gap_cap_s
        self._events: dict[int, object] = {}
        self._rid = 0
        self._session = 0
        self._cursor = w.lanes  # lane l starts with trajectory l; then the dataset in order
        self.boundary_s = 0.0  # the measured phase starts here
        self.stop_s = float("inf")
        self.cutoff_s = float("inf")  # the run ends here (sim.serve.engine.Simulation.run)
        self.sessions_started = 0
        self.warmup_failed = 0  # warm-up calls cut by the warm-up grace period (the run aborted)
        self._warmed = 0  # lanes whose warm-up calls have finished
        self.gaps: list[float] = []  # each measured call's idle wait after its chain's previous call (or join)
        self._measured = sim.env.event()

    # ----- sending -----------------------------------------------------------------------------------
    def _finished(self, req: Request) -> None:
        ev = self._events.pop(req.rid, None)
        if ev is not None:
            ev.succeed(self.env.now)

    def _send(self, call: Call, session: int, turn: int, output_len: int | None = None):
        req = Request(self._rid, self.env.now, call.input_len, output_len or call.output_len,
                      [(session, p) for p in call.pages], session=session, round=turn)  # fmt: skip
        self._rid += 1
        ev = self.env.event()
        self._events[req.rid] = ev
        self.sim.dispatch(req)
        return ev

    def _draw(self, k: int) -> Trajectory:
        """Trajectory ``k`` of the dataset (round and round), on the capped timeline when the cap is set."""
        traj = self.trajs[k % len(self.trajs)]
        return traj if self.cap is None else capped_timeline(traj, self.cap)

    # ----- one trajectory ----------------------------------------------------------------------------
    def _subagent(self, group: Subagent, session: int, spawn_delay: float, first_turn: int):
        """A subagent group's chain; returns when it ended, or infinity when the duration's end cut it (a call
        would have gone after it): the parent's next call, which waits for the group, is then never sent."""
        env, spawn = self.env, spawn_delay
        prev = None
        for k, call in enumerate(group.calls):
            gap = max(0.0, call.t - group.t) if prev is None else end_to_start(prev, call.t)
            if (env.now + spawn if k == 0 else env.now) + gap >= self.stop_s:  # when the waits below would end
                return math.inf  # no idle wait past the end: the run ends with its last call, not a think time
            if k == 0:
                yield env.timeout(spawn)
            else:
                self.gaps.append(gap)
            yield env.timeout(gap)
            yield self._send(call, session, first_turn + k)
            prev = call
        return env.now

    def _tree(self, traj: Trajectory, session: int, start: int, t_ref: float):
        """Play ``traj`` from step ``start``, the first call's gap counted from recorded time ``t_ref``; returns
        False if the duration's end cut it (its next call would have gone after the end)."""
        env, steps = self.env, traj.steps
        groups: dict[int, object] = {}
        prev: Call | None = None
        cut = False
        turn = sum(len(s.calls) if isinstance(s, Subagent) else 1 for s in steps[:start])
        for i in range(start, len(steps)):
            step = steps[i]
            if isinstance(step, Subagent):
                delay = end_to_start(prev, step.t) if prev else max(0.0, step.t - t_ref)
                groups[i] = env.process(self._subagent(step, session, delay, turn))
                turn += len(step.calls)
                continue
            ready = env.now + (end_to_start(prev, step.t) if prev else max(0.0, step.t - t_ref))
            joins = [j for j in step.joins if j in groups]
            if joins:
                yield env.all_of([groups[j] for j in joins])
                last = max(groups[j].value for j in joins)
                ready = max(ready, last + max(0.0, step.t - max(steps[j].end_t for j in joins)))
            wait = max(0.0, ready - env.now)
            if env.now + wait >= self.stop_s:  # no idle wait past the end (see _subagent)
                cut = True
                break
            if prev:  # after the groups it joined, if any: the time the chain sat with nothing in flight
                self.gaps.append(wait)
            if wait:
                yield env.timeout(wait)
            yield self._send(step, session, turn)
            turn += 1
            prev = step
        alive = [p for p in groups.values() if p.is_alive]
        if alive:  # a lane is held until its whole tree drains
            yield env.all_of(alive)
        return not cut

    # ----- lanes -------------------------------------------------------------------------------------
    def _start_point(self, traj: Trajectory, rng: np.random.Generator) -> _Start:
        """Where a lane's first trajectory starts: t* is uniform over the ratios' share of the span of every call's
        start, its subagents' included (``timing/trajectory_source.py:602-651``); the warm-up is the primer before
        it and up to ``warmup_requests_per_lane`` parent calls after it, leaving one to measure."""
        times = [c.t for c in traj.calls()]
        t0, t1 = min(times), max(times)
        ratio = rng.uniform(self.w.trajectory_start_min_ratio, self.w.trajectory_start_max_ratio)
        t_star = t0 + ratio * (t1 - t0)
        start = next((i for i, s in enumerate(traj.steps) if s.t >= t_star), len(traj.steps))
        if start == 0:
            return _Start(t_star, 0, [], None)
        main = traj.main
        before = [c for i, c in main if i < start]
        lead = t_star - before[-1].t
        after = [(i, c) for i, c in main if i >= start][: self.w.warmup_requests_per_lane]
        after = after[: max(0, len(main) - len(before) - 1)]
        if not after:
            return _Start(t_star, start, before[-1:], lead)
        i, last = after[-1]
        return _Start(last.t + (last.api_time or 0.0), i + 1, before[-1:] + [c for _, c in after], lead)

    def _first(self, lane: int, rng: np.random.Generator) -> tuple[Trajectory, _Start]:
        traj = self._draw(lane)  # lane l starts with trajectory l
        return traj, self._start_point(traj, rng)

    def _lane(self, traj: Trajectory, plan: _Start, delay: float):
        """A lane: its warm-up (the primer ``delay`` after the warm-up began), then its trajectories."""
        env = self.env
        session = self._new_session()
        if plan.warm and delay > 0:
            yield env.timeout(delay)
        for call in plan.warm:
            yield self._send(call, session, -1, output_len=1)
        self._warmed += 1
        if self._warmed == self.w.lanes:
            self._begin()
        yield self._measured
        played = yield from self._tree(traj, session, plan.step, plan.t_ref)
        while played and env.now < self.stop_s:
            traj = self._draw(self._cursor)
            self._cursor += 1
            played = yield from self._tree(traj, self._new_session(), 0, traj.steps[0].t)

    def _new_session(self) -> int:
        self._session += 1
        self.sessions_started += 1
        return self._session

    def planned_end_s(self) -> float:
        """When the run ends at the latest, as known now: the measured phase's end plus its grace period; during
        the warm-up, as if the warm-up ended now (a progress bar's total, which grows until the warm-up ends)."""
        stop = self.stop_s if self._measured.triggered else self.env.now + self.w.benchmark_duration_s
        return stop + (self.w.benchmark_grace_period_s or 0.0)

    def _begin(self) -> None:
        self.boundary_s = self.env.now
        self.stop_s = self.env.now + self.w.benchmark_duration_s
        if self.w.benchmark_grace_period_s is not None:
            self.cutoff_s = self.stop_s + self.w.benchmark_grace_period_s
        self._measured.succeed()

    def run(self):
        """The arrival process: every lane, until the duration ends and their trees drain."""
        env, rng = self.env, self.sim.rng
        self.sim.on_finish = self._finished
        firsts = [self._first(lane, rng) for lane in range(self.w.lanes)]
        # aiperf spreads the primers so that every lane's t* lands at one instant: a primer recorded ``lead``
        # before its t* is sent at ``max lead - lead`` (agentic_replay.py:525-640; it caps a lead at the idle cap,
        # :475-487, which the capped timeline already keeps every gap under)
        top = max((p.lead for _, p in firsts if p.lead is not None), default=0.0)
        lanes = env.all_of([env.process(self._lane(traj, p, top - (p.lead or 0.0))) for traj, p in firsts])
        del firsts  # a lane holds its trajectory while it plays it, this process not at all
        grace = self.w.warmup_grace_period_s
        yield self._measured if grace is None else self._measured | env.timeout(grace)
        if not self._measured.triggered:  # aiperf cancels the warm-up calls in flight and aborts
            self.warmup_failed = len(self._events)
            self.cutoff_s = env.now
            return
        if self.cutoff_s < float("inf"):
            yield lanes | env.timeout(self.cutoff_s - env.now)
        else:
            yield lanes


# ----- AgentX's report -----------------------------------------------------------------------------------
def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def agentx_report(df: pd.DataFrame, player: LanePlayer, samples: list[dict], *, gpus: int, l1_pages: int,
                  page_tokens: int) -> dict:  # fmt: skip
    """The figures AgentX publishes, over the measured phase (warm-up calls excluded)."""
    m = df[df["arrival_s"] >= player.boundary_s] if not df.empty else df
    out: dict = {"client": "aiperf_agentic", "lanes": player.w.lanes, "gpus": gpus, "requests": len(m),
                 "sessions_started": player.sessions_started, "measured_from_s": player.boundary_s}  # fmt: skip
    if player.warmup_failed:
        out.update(requests=0, warmup_failed=player.warmup_failed, warmup_cut_s=player.cutoff_s)
        return out
    if m.empty:
        return out
    duration = float(m["finish_s"].max() - m["arrival_s"].min())
    n_in, n_out = int(m["input_tokens"].sum()), int(m["output_tokens"].sum())
    dec = m[m["output_tokens"] > 1]
    itl = ((dec["e2e_s"] - dec["ttft_s"]) / (dec["output_tokens"] - 1)).to_numpy(float)
    itl = itl[itl > 0]
    ttft = m["ttft_s"].to_numpy(float)
    dev, host, sto = (int(m[c].sum()) for c in ("device_hit_tokens", "host_hit_tokens", "storage_hit_tokens"))
    live = [s for s in samples if player.boundary_s <= s["time_s"] <= m["finish_s"].max()]
    queue = np.array([s["waiting"] for s in live], float)
    running = np.array([s["running"] for s in live], float)
    usage = np.array([(s["l1_kv_pages"] * page_tokens - s["evictable_tokens"]) / (l1_pages * page_tokens)
                      for s in live], float)  # fmt: skip
    out.update({
        "duration_s": duration,
        "tok_per_s_per_gpu": (n_in + n_out) / duration / gpus if duration else 0.0,
        "input_tok_per_s_per_gpu": n_in / duration / gpus if duration else 0.0,
        "output_tok_per_s_per_gpu": n_out / duration / gpus if duration else 0.0,
        "ttft_s": {"mean": float(ttft.mean()), "p50": _pct(ttft, 50), "p90": _pct(ttft, 90)},
        "itl_s": {"mean": float(itl.mean()) if len(itl) else 0.0, "p50": _pct(itl, 50), "p90": _pct(itl, 90)},
        "prefix_hit": (dev + host + sto) / max(1, n_in),
        "gpu_hit": dev / max(1, n_in), "cpu_hit": host / max(1, n_in), "storage_hit": sto / max(1, n_in),
        "queue_req": {"p50": _pct(queue, 50), "p90": _pct(queue, 90)},
        "running_req": {"p50": _pct(running, 50), "p90": _pct(running, 90)},
        "full_token_usage": {"mean": float(usage.mean()) if len(usage) else 0.0, "p90": _pct(usage, 90)},
    })  # fmt: skip
    out.update(traffic_figures(m, player, duration))
    return out


def traffic_figures(m: pd.DataFrame, player: LanePlayer, duration: float) -> dict:
    """What the lanes offered over the measured phase, as aiperf's own report states its traffic: calls a lane
    makes an hour, input and output lengths (ISL / OSL), the idle gap the client waited before a chain's next call
    (the recorded end-to-start gap on the capped timeline, counted from the join when the call waited for
    subagents), and when the warm-up ended."""
    isl, osl = m["input_tokens"].to_numpy(float), m["output_tokens"].to_numpy(float)
    gaps = np.array(player.gaps, float)
    lane_hours = player.w.lanes * duration / 3600
    return {"calls_per_lane_hour": len(m) / lane_hours if lane_hours else 0.0,
            "isl": {"mean": float(isl.mean()), "p50": _pct(isl, 50)},
            "osl": {"mean": float(osl.mean()), "p50": _pct(osl, 50)},
            "idle_gap_s": {"mean": float(gaps.mean()) if len(gaps) else 0.0, "p50": _pct(gaps, 50),
                           "gaps": len(gaps), "cap_s": player.cap},
            "warmup_end_s": player.boundary_s}  # fmt: skip


def format_agentx_report(r: dict) -> str:
    if r.get("warmup_failed"):
        return (f"aiperf agentic ({r['lanes']} lanes): {r['warmup_failed']} warm-up call(s) still in flight at the warm-up "
                f"grace period ({r['warmup_cut_s']:g} s): aiperf cancels them and aborts the run "
                "(TrajectoryWarmupFailedError); no measured phase")  # fmt: skip
    if "duration_s" not in r:
        return f"aiperf agentic ({r['lanes']} lanes): no measured requests"
    q, run, u, g = r["queue_req"], r["running_req"], r["full_token_usage"], r["idle_gap_s"]
    cap = "uncapped" if g["cap_s"] is None else f"capped at {g['cap_s']:g} s"
    return "\n".join([
        f"aiperf agentic, {r['lanes']} lanes: {r['requests']:,} measured requests over {r['duration_s']:,.1f} s, "
        f"{r['sessions_started']:,} sessions",
        f"  tok/s/GPU {r['tok_per_s_per_gpu']:,.0f} (in {r['input_tok_per_s_per_gpu']:,.0f}, "
        f"out {r['output_tok_per_s_per_gpu']:,.0f}) on {r['gpus']} GPU(s)",
        f"  TTFT of the measured phase: mean {r['ttft_s']['mean']:.3f} s, p50 {r['ttft_s']['p50']:.3f} s; "
        f"ITL p90 {r['itl_s']['p90'] * 1e3:.1f} ms",
        f"  prefix hit {r['prefix_hit']:.1%} (GPU {r['gpu_hit']:.1%}, CPU {r['cpu_hit']:.1%}"
        + (f", storage {r['storage_hit']:.1%})" if r["storage_hit"] else ")"),
        f"  #queue-req p50 {q['p50']:.0f} / p90 {q['p90']:.0f}; #running-req p50 {run['p50']:.0f} / p90 {run['p90']:.0f}; "
        f"full token usage mean {u['mean']:.2f}, p90 {u['p90']:.2f}",
        f"  traffic: {r['calls_per_lane_hour']:,.1f} calls a lane-hour; ISL mean {r['isl']['mean']:,.0f} / p50 "
        f"{r['isl']['p50']:,.0f}; OSL mean {r['osl']['mean']:,.0f} / p50 {r['osl']['p50']:,.0f}; idle gap mean "
        f"{g['mean']:.2f} s / p50 {g['p50']:.2f} s ({cap}); warm-up ended at {r['warmup_end_s']:,.1f} s",
    ])  # fmt: skip
