"""aiperf's per-trajectory idle-gap cap (``--trace-idle-gap-cap-seconds``) as aiperf 0.13.0 applies it.

The cap is not a ceiling on each end-to-start gap: aiperf compresses the trajectory's timeline
(``dataset/loader/weka_trace.py``: ``_IdleGapTimeWarp``, :300-347, and ``_build_trace_idle_timing``, :809-895).
Every request start of the trajectory, its subagents' included, is sorted; a gap between two consecutive starts
longer than the cap keeps its first ``cap`` seconds and loses the rest, so everything after it moves earlier by
the excess, and a time inside a lost tail (a subagent group's end) lands on the tail's start. The end-to-start
delays are then taken on that timeline (``_end_to_start_delay_ms``: the start-to-start gap less the previous
call's ``api_time``, at least 0), so a capped gap after a call of ``api_time`` a is ``cap - a``, and a group's
spawn and end move with the calls around them.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace

from sim.workload.trajectory import Call, Subagent, Trajectory

__all__ = ["capped_timeline"]


class _Warp:
    """Maps a recorded time to the capped timeline of one trajectory's request starts."""

    def __init__(self, starts: list[float], cap: float) -> None:
        self.cap = cap
        self.raw_start: list[float] = []
        self.raw_end: list[float] = []
        self.shift_before: list[float] = []  # the excess cut before each long gap
        shift = 0.0
        starts = sorted(starts)
        for a, b in zip(starts, starts[1:]):
            if b - a > cap:
                self.raw_start.append(a)
                self.raw_end.append(b)
                self.shift_before.append(shift)
                shift += b - a - cap

    def map(self, t: float) -> float:
        i = bisect_right(self.raw_start, t) - 1
        if i < 0:
            return t
        start, shift = self.raw_start[i], self.shift_before[i]
        if t < self.raw_end[i]:
            return t - shift if t - start <= self.cap else start - shift + self.cap
        return t - shift - (self.raw_end[i] - start - self.cap)


def capped_timeline(traj: Trajectory, cap: float) -> Trajectory:
    """``traj`` with every call's and group's time on aiperf's capped timeline (the keys are shared, not copied)."""
    starts = [c.t for c in traj.calls()]
    warp = _Warp(starts, cap)
    if not warp.raw_start:
        return traj

    def call(c: Call) -> Call:
        return replace(c, t=warp.map(c.t))

    steps: list[Call | Subagent] = [
        Subagent(warp.map(s.t), warp.map(s.end_t), [call(c) for c in s.calls]) if isinstance(s, Subagent) else call(s)
        for s in traj.steps
    ]
    return Trajectory(traj.id, steps)
