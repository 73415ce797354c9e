"""The plan report's pictures, drawn from its data alone (``plan.json``), so a test can redraw the shipped ones.

What a reader relies on, held by ``tests/sim/app/plan/test_figures.py``: every legend sits outside the data
(beside or below its axes); panels that compare one x quantity share its range; a panel with nothing to draw says
so; a series lying along an axis edge (a hit rate of 0 at every size) is named in a note rather than hidden in the
frame; no figure here is below zero, so no axis is either, and the 95% intervals' lower ends are clipped at 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from textwrap import fill
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["FIGURES", "draw", "save"]

GB = 1e9
NOTHING = "nothing to plot"
AT_EDGE = "along the axis edge"
COINCIDE = "drawn one over the other"


def _fig(nrows: int = 1, ncols: int = 1, size=(7.0, 4.0), sharex: bool = False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=110, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex)
    return fig, axes


def _err(points: list[dict], metric: str, scale: float = 1.0):
    """Means and error-bar lengths (below, above) of ``metric``; the interval's lower end clipped at 0."""
    means = [p[metric]["mean"] * scale if metric in p else math.nan for p in points]
    lo = [max(0.0, p[metric]["mean"] - max(p[metric]["lo"], 0.0)) * scale if metric in p else 0 for p in points]
    hi = [(p[metric]["hi"] - p[metric]["mean"]) * scale if metric in p else 0 for p in points]
    return means, [lo, hi]


def _legend_beside(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=7)


def _legend_below(ax: Axes, ncols: int = 1) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0, fontsize=7, ncols=ncols)


def _say(ax: Axes, text: str, y: float = 0.5) -> None:
    ax.text(0.5, y, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.3", wrap=True)


def _series(ax: Axes) -> list[tuple[str, list[float], list[float]]]:
    """(label, x, y) of every plotted series in data coordinates: lines and error-bar points."""
    from matplotlib.container import ErrorbarContainer

    out = [(ln.get_label(), list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines
           if ln.get_transform() == ax.transData and not ln.get_label().startswith("_")]  # fmt: skip
    out += [(c.get_label(), list(c.lines[0].get_xdata()), list(c.lines[0].get_ydata())) for c in ax.containers
            if isinstance(c, ErrorbarContainer) and c.lines[0] is not None]  # fmt: skip
    return out


def _finite(ys: list) -> list[float]:
    return [float(y) for y in ys if y is not None and math.isfinite(float(y))]


def _name_hidden(ax: Axes) -> None:
    """Say which series the frame or another series hides: one along the bottom or top of the frame at every
    point (a hit rate of 0 at every size), or two drawn one over the other."""
    lo, hi = ax.get_ylim()
    series = _series(ax)
    lines = []
    for label, _, ys in series:
        ys = _finite(ys)
        if ys and (all(abs(y - lo) <= 1e-12 for y in ys) or all(abs(y - hi) <= 1e-12 for y in ys)):
            lines.append(f"{AT_EDGE}: {label}, {ys[0]:g} at every point")
    for i, (la, xa, ya) in enumerate(series):
        for lb, xb, yb in series[i + 1:]:
            if len(ya) > 1 and xa == xb and _finite(ya) == _finite(yb) and len(_finite(ya)) == len(ya):
                lines.append(f"{COINCIDE}: {la} and {lb}")
    if lines:
        _say(ax, "\n".join(lines), y=0.1)


def gb_text(gb: float) -> str:
    """GB as a label shows it: whole above 10, else to 3 significant figures (0.3 GB is not "0 GB")."""
    return f"{gb:,.0f} GB" if abs(gb) >= 10 else f"{gb:.3g} GB"


def _host(data: dict) -> Figure:
    h = data["host_memory"]
    cands = h["candidates"]
    fig, axes = _fig(size=(8.5, 4.0))
    ax = axes[0][0]
    names = [c["label"].removeprefix("--hicache-") for c in cands]
    bottom = [0.0] * len(cands)
    for pool in h["pools"]:
        vals = [c["pool_bytes_per_rank"].get(pool["name"], 0) * c["ranks_per_node"] / GB for c in cands]
        ax.bar(names, vals, bottom=bottom, label=pool["name"])
        bottom = [b + v for b, v in zip(bottom, vals)]
    budget = cands[0]["budget_per_rank"] * cands[0]["ranks_per_node"] / GB if cands else 0
    ax.axhline(budget, color="r", ls="--", lw=1,  # the node's DRAM sits 10 GiB above: one line, both named
               label=f"SGLang's limit, {gb_text(budget)}:\nnode DRAM {h['node_dram_gb']:g} GB\nless the 10 GiB reserve")
    if h.get("pinnable_gb") is not None:  # the platform's ceiling (sim/model/pinning.py), below DRAM's
        ax.axhline(h["pinnable_gb"], color="m", ls=":", lw=1.2,
                   label=f"pinnable, {gb_text(h['pinnable_gb'])}:\n" + fill(h.get("pinnable_source", ""), 34))  # fmt: skip
    for i, c in enumerate(cands):
        if c["status"] == "refused":  # drawn on the axis: a refused row may pin nothing
            by = "past the\npinnable" if c["reason"].startswith("pins ") else "refused\nby SGLang"
            ax.text(i, 0.03, by, ha="center", va="bottom", color="r", fontsize=8, transform=ax.get_xaxis_transform(),
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5})  # readable on a bar
    ax.set_ylabel("pinned host memory per node (GB)")
    ranks = cands[0]["ranks_per_node"] if cands else 1
    ax.set_title(f"Host pools per node ({ranks} rank{'s' if ranks > 1 else ''}), pool by pool")
    ax.tick_params(axis="x", labelsize=8)
    # Linear: a stacked segment's height is its pool's bytes (a log axis shrinks the upper ones). Pools far below
    # the node's limits are drawn at their own scale, the limits said above it rather than flattening the bars.
    tallest = max(bottom, default=0.0)
    ceilings = [budget, *([h["pinnable_gb"]] if h.get("pinnable_gb") is not None else [])]
    if tallest > 0 and min(ceilings) > 4 * tallest:
        ax.set_ylim(0, tallest * 1.3)
        what = "the limit" if len(ceilings) == 1 else "the limits"
        ax.text(0.5, 0.97, f"{what} ({', '.join(gb_text(c) for c in ceilings)}) far above this scale",
                ha="center", va="top", fontsize=8, color="r", transform=ax.transAxes)  # fmt: skip
    else:
        ax.set_ylim(bottom=0)
    _legend_beside(ax)
    return fig


def _value(data: dict) -> Figure:
    v = data["value"]
    pts = v["points"]
    x = [p["host_bytes_per_node"] / GB for p in pts]
    fig, axes = _fig(1, 3, size=(13.0, 4.6), sharex=True)
    a, b, c = axes[0]
    curve = v["curve"]
    cx = [p["host_gb_per_node"] for p in curve]
    if any(p["replay_l1l2"] is not None for p in curve):
        a.plot(cx, [p["replay_l1l2"] for p in curve], "-", color="C0", label="L1 + L2, replay")
        a.plot(cx, [p["replay_l1"] for p in curve], ":", color="C0", label="of which L1")
    if v.get("one_pass_dense"):
        dense = v["one_pass_dense"]
        a.plot([p["host_gb_per_node"] for p in dense], [p["hit"] for p in dense], "--", color="C2",
               label="one-pass LRU curve (every size)")
    if any(p["clairvoyant"] is not None for p in curve):
        a.plot(cx, [p["clairvoyant"] for p in curve], "-.", color="0.4", label="clairvoyant ceiling")
    m, e = _err(pts, "hit_total")
    a.errorbar(x, m, yerr=e, fmt="o", color="C1", capsize=3, label="timed runs (95% interval)")
    if v["knee_gb_per_node"] is not None:
        a.axvline(v["knee_gb_per_node"], color="C3", lw=0.8, ls="--", label=f"knee {gb_text(v['knee_gb_per_node'])}")
    cands = data["host_memory"]["candidates"]
    limit = cands[0]["budget_per_rank"] * cands[0]["ranks_per_node"] / GB if cands else math.inf
    right = max(cx + x) if cx or x else 1.0
    if limit < right:
        a.axvspan(limit, right, color="0.9", zorder=0, label="past SGLang's limit: does not start")
    a.set_ylabel("hit rate (share of input tokens)")
    a.set_title("Hit rate vs host memory")
    m, e = _err(pts, "input_tokens_per_s")
    b.errorbar(x, m, yerr=e, fmt="o-", capsize=3, label="timed runs (95% interval)")
    b.set_ylabel("input throughput (tokens/s)")
    b.set_title("Throughput vs host memory")
    for metric, style, lab in (("ttft_p90_s", "o-", "TTFT p90"), ("ttft_mean_s", "s--", "TTFT mean")):
        m, e = _err(pts, metric)
        c.errorbar(x, m, yerr=e, fmt=style, capsize=3, label=lab)
    if "ttft_p90_s" in data["slo"]:
        c.axhline(data["slo"]["ttft_p90_s"], color="r", lw=1, label="SLO TTFT p90")
    c.set_ylabel("TTFT (s)")
    c.set_title("TTFT vs host memory")
    a.set_xlim(-0.02 * right, right * 1.02)  # shared: the three panels compare the same host sizes
    for ax in (a, b, c):
        ax.set_xlabel("pinned host memory per node (GB)")
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.08)  # headroom: a ceiling line is not the frame
        _name_hidden(ax)
        _legend_below(ax, ncols=2)
    return fig


def _bars(ax: Axes, xs: list[float], rows: list[dict], metric: str, scale: float, width: float, **kw) -> bool:
    """Bars of ``metric`` (with intervals where it has them); True if any is above 0."""
    if rows and isinstance(rows[0].get(metric), dict):
        m, e = _err(rows, metric, scale)
        ax.bar(xs, m, width, yerr=e, capsize=2, **kw)
        return any(v > 0 for v in m if math.isfinite(v))
    vals = [(r.get(metric) or 0) * scale for r in rows]
    ax.bar(xs, vals, width, **kw)
    return any(v > 0 for v in vals)


def _nothing(ax: Axes, why: str) -> None:
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    _say(ax, f"{NOTHING}: {why}")


def _write_policy(data: dict) -> Figure:
    rows = data["write_policy"]["rows"]
    labels = [r["policy"] for r in rows]
    panels = (("hit_total", "hit rate", 1.0), ("ttft_p90_s", "TTFT p90 (s)", 1.0), ("d2h_bytes", "D2H copied (GB)", 1 / GB))
    fig, axes = _fig(1, len(panels), size=(3.6 * len(panels), 3.8))
    for ax, (metric, ylabel, scale) in zip(axes[0], panels):
        if not _bars(ax, list(range(len(rows))), rows, metric, scale, 0.8):
            _nothing(ax, f"{ylabel} is 0 under every policy")
        ax.set_xticks(range(len(rows)), labels)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.suptitle(f"Write policy at {data['write_policy']['candidate']} (error bars: 95% interval, clipped at 0)")
    return fig


def _l3(data: dict) -> Figure:
    rows = data["l3"]["rows"]
    policies = list(dict.fromkeys(r["prefetch_policy"] for r in rows))
    thresholds = list(dict.fromkeys(r["prefetch_threshold"] for r in rows))
    panels = (("hit_storage", "L3 hit rate (share of input tokens)"), ("prefetches", "prefetches per run"),
              ("cut_below_threshold", "tokens cut by the threshold"))  # fmt: skip
    fig, axes = _fig(1, 3, size=(12.0, 3.9))
    width = 0.8 / len(policies)
    for ax, (metric, ylabel) in zip(axes[0], panels):
        drawn = False
        for i, pol in enumerate(policies):
            sel = [next(r for r in rows if r["prefetch_policy"] == pol and r["prefetch_threshold"] == t) for t in thresholds]
            xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(thresholds))]
            drawn |= _bars(ax, xs, sel, metric, 1.0, width, label=pol, color=f"C{i}")
        ax.set_xticks(range(len(thresholds)), [str(t) for t in thresholds])
        ax.set_xlabel("prefetch threshold (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        if drawn:
            _legend_below(ax, ncols=len(policies))
        else:
            _nothing(ax, "0 at every threshold and policy\n(no request's storage span qualified)")
    fig.suptitle(f"L3 prefetch at {data['l3']['candidate']} (error bars: 95% interval, clipped at 0)")
    return fig


def _swa(data: dict) -> Figure:
    rows = data["swa"]["rows"]
    fig, axes = _fig(size=(8.5, 4.0))
    ax = axes[0][0]
    r = [row["swa_full_tokens_ratio"] for row in rows]
    for tier, color in (("l1", "C0"), ("l1l2", "C1")):
        if f"{tier}_hit_v4" in rows[0]:
            name = "L1" if tier == "l1" else "L1 + L2"
            ax.plot(r, [row[f"{tier}_hit_v4"] for row in rows], "o-", color=color, label=f"{name}: V4 (FULL + SWA)")
            ax.plot(r, [row[f"{tier}_hit_no_window"] for row in rows], "s--", color=color, alpha=0.6,
                    label=f"{name}: same Full pages, no window")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xticks(r, [f"{x:g}" for x in r])  # every share labelled, in plain numbers
    ax.minorticks_off()
    ax.set_xlabel("swa_full_tokens_ratio (SWA pool / Full pool tokens; same KV bytes)")
    ax.set_ylabel("hit rate (share of input tokens)")
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 0.05) * 1.08)
    ax.set_title("Hit rate lost to the SWA pool")
    _name_hidden(ax)
    _legend_beside(ax)
    return fig


def _hisparse(data: dict) -> Figure:
    h = data["hisparse"]
    rows = [r for r in h["rows"] if r["on_output_tok_s"] is not None and r["off_output_tok_s"] is not None]
    fig, axes = _fig(size=(8.0, 4.0))
    ax = axes[0][0]
    b = [r["batch_cap"] for r in rows]
    ax.plot(b, [r["on_output_tok_s"] for r in rows], "o-", label="HiSparse on")
    ax.plot(b, [r["off_output_tok_s"] for r in rows], "s--", label="HiSparse off")
    if h["crossover_batch"] is not None:
        ax.axvline(h["crossover_batch"], color="r", lw=0.8, ls="--", label=f"crossover: batch {h['crossover_batch']}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(b, [str(x) for x in b])
    ax.minorticks_off()
    ax.set_xlabel("decode batch cap (--max-running-requests)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"HiSparse on {h['scenario']}")
    _legend_beside(ax)
    return fig


# name -> (whether the data has the figure, how to draw it)
FIGURES: dict[str, tuple[Callable[[dict], bool], Callable[[dict], Figure]]] = {
    "host_memory.png": (lambda d: True, _host),
    "value.png": (lambda d: True, _value),
    "write_policy.png": (lambda d: bool(d["write_policy"]["rows"]), _write_policy),
    "l3.png": (lambda d: bool(d["l3"]["rows"]), _l3),
    "swa.png": (lambda d: bool(d["swa"].get("applies")), _swa),
    "hisparse.png": (lambda d: bool(d["hisparse"].get("applies")), _hisparse),
}


def draw(data: dict) -> dict[str, Figure]:
    """Every figure the plan's data has, by file name."""
    return {name: make(data) for name, (has, make) in FIGURES.items() if has(data)}


def save(data: dict, folder: Path) -> list[str]:
    """Draw and write the figures into ``folder``; their names."""
    figs = draw(data)
    for name, fig in figs.items():
        fig.savefig(folder / name)
    return list(figs)
