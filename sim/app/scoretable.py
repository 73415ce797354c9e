"""``score``'s table: each measured figure beside the simulated mean and its 95% interval over seeds, the error,
and the inputs that drive a miss (hit rates by tier, ISL/OSL, calls per lane-hour, queue, token usage), written
as CSV, JSON and a picture.

A time or a rate is compared by its relative error (simulated / measured - 1); a share (a hit rate, the token
usage) by its difference in points, as a relative error of a share near 0 says nothing. The picture draws the
first as simulated / measured with its interval against 1, the second on its own 0-100% axis.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from sim.app.seeds import interval
from sim.interop.measured import Measured

__all__ = ["FIGURES", "ScoreRow", "format_request_for_request", "format_score", "plot_score", "request_for_request", "score_rows", "write_score"]

# figure -> (label, unit, driver: an input that explains a miss rather than an outcome)
FIGURES = {
    "ttft_mean_s": ("TTFT mean", "s", False), "ttft_p50_s": ("TTFT p50", "s", False),
    "ttft_p90_s": ("TTFT p90", "s", False), "ttft_p99_s": ("TTFT p99", "s", False),
    "tpot_mean_s": ("ITL / TPOT mean", "s", False), "tpot_p90_s": ("ITL p90", "s", False),
    "e2e_mean_s": ("latency mean", "s", False), "duration_s": ("duration", "s", False),
    "input_tokens_per_s": ("input throughput", "tok/s", False),
    "output_tokens_per_s": ("output throughput", "tok/s", False),
    "total_tokens_per_s": ("total throughput", "tok/s", False), "requests_per_s": ("request rate", "req/s", False),
    "tok_per_s_per_gpu": ("throughput per GPU", "tok/s/GPU", False),
    "tok_per_s_per_user": ("interactivity", "tok/s/user", False),
    "hit_total": ("hit rate", "%", True), "hit_device": ("hit L1 (GPU)", "%", True),
    "hit_host": ("hit L2 (host)", "%", True), "hit_storage": ("hit L3 (storage)", "%", True),
    "isl_mean": ("ISL mean", "tokens", True), "osl_mean": ("OSL mean", "tokens", True),
    "calls_per_lane_hour": ("calls per lane-hour", "calls", True), "queue_mean": ("queue mean", "requests", True),
    "running_mean": ("running mean", "requests", True), "token_usage": ("token usage", "%", True),
    "queue_now": ("queue at the snapshot", "requests", True), "running_now": ("running at the snapshot", "requests", True),
}  # fmt: skip
SHARES = {k for k, (_, unit, _) in FIGURES.items() if unit == "%"}
# Whole-run drivers the table shows from the simulation when no measured file reports them.
SIMULATED_DRIVERS = ("hit_total", "hit_device", "hit_host", "hit_storage", "calls_per_lane_hour", "queue_mean",
                     "running_mean", "token_usage")  # fmt: skip


@dataclass(frozen=True)
class ScoreRow:
    figure: str  # e.g. "step2.ttft_mean_s"
    source: str  # the measured file ("" for a driver only the simulation has)
    measured: float | None  # None: a driver the files do not report, shown from the simulation alone
    mean: float | None  # None: the simulation has no such figure
    lo: float | None
    hi: float | None
    seeds: int
    error: float | None  # relative (simulated / measured - 1), or points for a share
    driver: bool

    @property
    def base(self) -> str:
        return self.figure.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        part, _, _ = self.figure.rpartition(".")
        name = FIGURES.get(self.base, (self.base, "", False))[0]
        return f"{part} {name}" if part else name


def _error(name: str, measured: float, mean: float) -> float | None:
    if name in SHARES:
        return 100 * (mean - measured)
    return mean / measured - 1 if measured else None


def score_rows(runs: list[Measured], per_seed: pd.DataFrame) -> list[ScoreRow]:
    """One row a measured figure, outcomes first, then the drivers."""
    rows = []
    for m in runs:
        for figure, value in m.figures.items():
            base = figure.rsplit(".", 1)[-1]
            if figure in per_seed and per_seed[figure].notna().any():
                iv = interval(per_seed[figure])
                lo, hi = (max(iv.lo, 0.0), iv.hi) if iv.half is not None else (None, None)  # a figure is >= 0
                rows.append(ScoreRow(figure, m.source, value, iv.mean, lo, hi, iv.n, _error(base, value, iv.mean),
                                     FIGURES.get(base, ("", "", True))[2]))  # fmt: skip
            else:
                rows.append(ScoreRow(figure, m.source, value, None, None, None, 0, None, FIGURES.get(base, ("", "", True))[2]))
    seen = {r.figure for r in rows}
    for figure in SIMULATED_DRIVERS:  # what explains a miss even where the run did not report it
        if figure not in seen and figure in per_seed and per_seed[figure].notna().any():
            iv = interval(per_seed[figure])
            lo, hi = (max(iv.lo, 0.0), iv.hi) if iv.half is not None else (None, None)
            rows.append(ScoreRow(figure, "", None, iv.mean, lo, hi, iv.n, None, True))
    return sorted(rows, key=lambda r: r.driver)


def request_for_request(measured: list[float | None], seeds: list[list[float]]) -> dict | None:
    """Each replayed request's simulated TTFT over its measured one, pooled over seeds: the median ratio, its
    10th and 90th percentiles, and the share within 25% (requests without a measured TTFT left out)."""
    import numpy as np

    ratios = [s / m for per_seed in seeds for m, s in zip(measured, per_seed)
              if m and s is not None and not math.isnan(s)]  # fmt: skip
    if not ratios:
        return None
    r = np.array(ratios)
    return {"requests": len(measured), "pairs": len(r), "median": float(np.median(r)),
            "p10": float(np.percentile(r, 10)), "p90": float(np.percentile(r, 90)),
            "within_25pct": float(np.mean(np.abs(r - 1) <= 0.25))}  # fmt: skip


def format_request_for_request(rr: dict) -> str:
    return (f"request for request ({rr['requests']:,} requests, {rr['pairs']:,} pairs over the seeds): simulated / "
            f"measured TTFT median {rr['median']:.2f} (p10 {rr['p10']:.2f}, p90 {rr['p90']:.2f}); "
            f"{rr['within_25pct']:.0%} within 25%")  # fmt: skip


def _fmt(name: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if name in SHARES:
        return f"{100 * value:.1f}%"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"


def format_score(rows: list[ScoreRow]) -> str:
    heads = ["figure", "unit", "measured", "simulated [95% interval]", "error"]
    several = len({r.source for r in rows if r.source}) > 1  # then each figure says which file it came from
    cells = []
    for r in rows:
        unit = FIGURES.get(r.base, ("", "", False))[1]
        sim = _fmt(r.base, r.mean)
        if r.lo is not None and r.hi != r.lo:  # no interval where every seed gave the same figure
            sim += f" [{_fmt(r.base, r.lo)}, {_fmt(r.base, r.hi)}]"
        err = "-" if r.error is None else (f"{r.error:+.1f} pt" if r.base in SHARES else f"{r.error:+.1%}")
        where = f"{r.source.rsplit('/', 1)[-1]}: " if several and r.source else ""
        cells.append([("  " if r.driver else "") + where + r.label, unit, _fmt(r.base, r.measured), sim, err])
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths)))]
    for i, c in enumerate(cells):
        if rows[i].driver and (i == 0 or not rows[i - 1].driver):
            lines.append("inputs that drive the misses:")
        lines.append("  ".join(v.ljust(w) if j < 2 else v.rjust(w) for j, (v, w) in enumerate(zip(c, widths))))
    return "\n".join(lines)


def write_score(rows: list[ScoreRow], folder: Path, requests: dict | None = None) -> list[str]:
    import json

    records = [{**asdict(r), "label": r.label, "unit": FIGURES.get(r.base, ("", "", False))[1],
                "error_kind": "points" if r.base in SHARES else "relative"} for r in rows]  # fmt: skip
    pd.DataFrame(records).to_csv(folder / "score.csv", index=False)
    clean = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()} for rec in records]
    doc = {"kind": "score", "rows": clean, **({"request_for_request": requests} if requests else {})}
    (folder / "score.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    names = ["score.csv", "score.json"]
    if any(r.mean is not None and r.measured is not None for r in rows):
        plot_score(rows, folder / "score.png")
        names.append("score.png")
    return names


def plot_score(rows: list[ScoreRow], out: Path) -> None:
    """Left: simulated / measured per figure (mean and 95% interval; 1 = exact). Right: the shares, measured
    (x) and simulated (o with interval), 0-100%."""
    from matplotlib.figure import Figure

    ratio = [r for r in rows if r.mean is not None and r.base not in SHARES and r.measured]
    share = [r for r in rows if r.mean is not None and r.base in SHARES and r.measured is not None]
    panels = [p for p in (ratio, share) if p]
    fig = Figure(figsize=(6.5 * len(panels), 0.9 + 0.32 * max(len(p) for p in panels)))
    axes = fig.subplots(1, len(panels), squeeze=False, gridspec_kw={"wspace": 0.55})[0]
    for ax, part in zip(axes, panels):
        y = list(range(len(part)))[::-1]
        if part is ratio:
            mid = [r.mean / r.measured for r in part]
            lo = [m - (r.lo / r.measured if r.lo is not None else m) for m, r in zip(mid, part)]
            hi = [(r.hi / r.measured if r.hi is not None else m) - m for m, r in zip(mid, part)]
            ax.errorbar(mid, y, xerr=[lo, hi], fmt="o", capsize=3, label="simulated (95% interval over seeds)")
            ax.axvline(1.0, color="k", lw=0.8, label="measured")
            ax.set_xlim(0, max(2.0, 1.1 * max(m + h for m, h in zip(mid, hi))))
            ax.set_xlabel("simulated / measured (1 = exact)", labelpad=2)
            labels = [f"{r.label} ({_fmt(r.base, r.measured)} {FIGURES.get(r.base, ('', '', 0))[1]})" for r in part]
        else:
            mid = [100 * r.mean for r in part]
            lo = [m - 100 * (r.lo if r.lo is not None else r.mean) for m, r in zip(mid, part)]
            hi = [100 * (r.hi if r.hi is not None else r.mean) - m for m, r in zip(mid, part)]
            ax.errorbar(mid, y, xerr=[lo, hi], fmt="o", capsize=3, label="simulated (95% interval)")
            ax.plot([100 * r.measured for r in part], y, "kx", label="measured")
            ax.set_xlim(0, 100)
            ax.set_xlabel("share of prompt tokens or of the KV pool (%)")
            labels = [r.label for r in part]
        ax.set_yticks(y, labels)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    fig.suptitle("measured vs simulated")
    from sim.base.fileio import atomic_path

    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
