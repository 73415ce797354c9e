"""``calibrate compute --from``: the step-time points a measured run's aggregate figures carry.

Any format ``hicache-sim score`` reads (:mod:`sim.interop.measured`) gives, per part of the run (a bench_serving
step, or the whole run) at concurrency ``c``:

- a decode point from the mean ITL (TPOT): one decode step over ``c`` requests holding, on average, their prompt
  and half their output each (``c x (ISL + OSL / 2)`` tokens);
- at concurrency 1 only, a prefill point from TTFT (its median where the file has one, else its mean): the
  uncached part of the mean prompt after its cached part, which at concurrency 1 waits behind nothing.

Throughput carries no further parameter: at a fixed concurrency it is the ITL and TTFT above over the run's
tokens, so it checks the fit (``hicache-sim score``) rather than entering it. A run whose file states no
concurrency takes the scenario's (its lanes, or its one bench_serving step's cap); with neither it gives no
point (its batch is unknown).
"""

from __future__ import annotations

from calibrate.compute import Point
from sim.interop.measured import Measured, part_of

__all__ = ["points_from_measured"]


def _part_points(m: Measured, part: str, conc: int) -> list[Point]:
    prefix = f"{part}." if part else ""
    f = {k.removeprefix(prefix): v for k, v in m.figures.items() if part_of(k) == part}
    isl, osl = f.get("isl_mean"), f.get("osl_mean")
    if isl is None:
        return []
    label = f"{m.source} {part or 'run'} c{conc}"
    out = []
    if f.get("tpot_mean_s") and osl:
        out.append(Point("decode", 0, int(conc * (isl + osl / 2)), conc, f["tpot_mean_s"], f"{label} ITL"))
    ttft = f.get("ttft_p50_s") or f.get("ttft_mean_s")
    cached = int(isl * f.get("hit_total", 0.0))
    if conc == 1 and ttft and isl - cached >= 1:
        out.append(Point("prefill", int(isl - cached), cached, 1, ttft, f"{label} TTFT"))
    return out


def points_from_measured(runs: list[Measured], concurrency: int | None = None) -> list[Point]:
    """Every point the runs' figures carry, in file order; ``concurrency`` (the scenario's) stands for a whole
    run's that its file does not state (aiperf's per-request export, /metrics)."""
    points = []
    for m in runs:
        parts = dict(m.concurrency)
        if not parts and concurrency is not None:
            parts[""] = (concurrency, None)
        for part, (conc, _) in parts.items():
            points += _part_points(m, part, conc)
    return points
