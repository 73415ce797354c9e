"""Figures from result files: threshold sweeps, HiSparse miss counts, a run's cache occupancy, and per-round figures.

Each kind reads one parquet (or the folder that holds it), checks its columns, and renders with
matplotlib (Agg, through a pyplot-free ``Figure``) to a temporary file renamed over the target, so a figure appears whole or not at
all. Bad input (missing file, missing columns, unknown kind or parameter) raises InputError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sim.app.tierages import plot_ages, read_ages
from sim.base.errors import InputError
from sim.base.fileio import atomic_path, check_output_file
from sim.base.inputs import check_input
from sim.base.text import plural

__all__ = ["KINDS", "compare_figure", "plot", "plot_compare", "plot_misses", "plot_occupancy", "plot_rounds", "plot_threshold"]

FORMATS = ("png", "svg")
SWEEP_DEFAULT_Y = ("hit_total", "ttft_p90_s", "input_tokens_per_s")
MISSES_COLUMNS = ("step", "misses", "policy", "device_buffer_size")
ROUNDS_COLUMNS = ("round", "ttft_s", "input_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens")
MAX_INSTANCE_LINES = 4  # instances an occupancy panel draws one by one (past it: their mean and range)
OCCUPANCY_COLUMNS = ("time_s", "instance", "waiting", "running", "l1_kv_pages", "l1_swa_pages", "l2_kv_pages",
                     "l2_swa_pages")  # fmt: skip
# Axis labels with units for the metric columns sim.app.sweep writes; anything else is labelled by its name.
METRIC_LABELS = {
    "input_tokens_per_s": "input throughput (tokens/s)",
    "output_tokens_per_s": "output throughput (tokens/s)",
    "requests_per_s": "throughput (requests/s)",
    "ttft_mean_s": "TTFT mean (s)",
    "ttft_p50_s": "TTFT p50 (s)",
    "ttft_p90_s": "TTFT p90 (s)",
    "ttft_p99_s": "TTFT p99 (s)",
    "hit_device": "L1 hit rate (share of input tokens)",
    "hit_host": "L2 hit rate (share of input tokens)",
    "hit_storage": "L3 hit rate (share of input tokens)",
    "hit_total": "hit rate (share of input tokens)",
    "dropped_tokens": "dropped tokens",
    "load_back_tokens": "loaded-back tokens",
    "backup_bytes": "backup (bytes)",
    "util_h2d": "H2D link busy (share of time)",
    "util_d2h": "D2H link busy (share of time)",
    "admission_stalls": "admission stalls",
    "simulated_s": "simulated time (s)",
}


def plot(kind: str, source: str | Path, out: str | Path, *, x: str | None = None,
         y: Sequence[str] | None = None) -> Path:  # fmt: skip
    """Render ``kind`` from ``source`` to ``out`` (.png or .svg); returns ``out``. Raises InputError."""
    if kind not in KINDS:
        raise InputError(f"unknown plot kind {kind!r} (choose from {', '.join(KINDS)})")
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise InputError(f"--out must end in .png or .svg, got {out.name!r}")
    if kind != "threshold" and (x is not None or y):
        raise InputError(f"--x and --y apply only to the threshold plot, not {kind}")
    check_output_file(out, "--out")
    reader, default_name, draw = KINDS[kind]
    df = reader(_resolve(source, default_name))
    fig = draw(df, x=x, y=y) if kind == "threshold" else draw(df)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
    return out


def _resolve(source: str | Path, default_name: str) -> Path:
    path = Path(source)
    if path.is_dir():
        path = path / default_name
    return check_input(path, "run's result file")


def _read(path: Path, required: Sequence[str]) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not parquet
        raise InputError(f"cannot read parquet: {' '.join(str(exc).split())[:200]}", source=str(path)) from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", source=str(path))
    if df.empty:
        raise InputError("no rows to plot", source=str(path))
    return df


def _legend_below(ax) -> None:
    """The legend under its panel, outside the data."""
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), borderaxespad=0)


def _figure(panels: int, title: str, width: float = 5.0, height: float = 3.8, ratios: Sequence[float] | None = None):
    """A pyplot-free figure: no global backend switch, nothing to close; ``savefig`` renders with Agg.
    ``ratios``: the panels' relative widths (the figure is ``width`` x their sum wide)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * (sum(ratios) if ratios else panels), height))
    axes = fig.subplots(1, panels, squeeze=False, gridspec_kw={"width_ratios": ratios} if ratios else None)
    fig.suptitle(title)
    return fig, list(axes[0])


# ------------------------------------------------------------------------------------------ threshold


def read_sweep(path: Path) -> pd.DataFrame:
    df = _read(path, ["point_id"])
    if "status" in df:  # failed points have no metrics
        df = df[df["status"] == "ok"].reset_index(drop=True)
        if df.empty:
            raise InputError("no finished points to plot (every point failed)", source=str(path))
    df.attrs["source"] = str(path)
    return df


def grid_columns(df: pd.DataFrame) -> list[str]:
    """The grid parameter columns of a sweep table: those between ``point_id`` and the metrics (dotted paths)."""
    from sim.scenario.load import field_paths

    known = field_paths()
    return [c for c in df.columns if c in known]


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
DASHES = ("-", "--", ":", "-.")


def plot_threshold(df: pd.DataFrame, *, x: str | None = None, y: Sequence[str] | None = None):
    """Metrics vs one grid parameter, one line per combination of the other varying parameters.

    Default panels: total hit rate, TTFT p90, input throughput. Repeated seeds (``sweep --seeds``) are drawn
    as their mean with its 95% interval (the table's, :func:`sim.app.seeds.aggregate`) as an error bar.
    """
    from sim.app.seeds import aggregate

    source = df.attrs.get("source", "sweep")
    params = grid_columns(df)
    varying = [c for c in params if df[c].nunique(dropna=False) > 1]
    if x is None:
        if not varying:
            raise InputError("no grid column varies; nothing to plot against", source=source)
        x = next((c for c in varying if c != "seed"), varying[0])
    elif x not in params:
        raise InputError(f"--x {x}: not a grid column (have: {', '.join(params) or 'none'})", source=source)
    metrics = list(y) if y else [m for m in SWEEP_DEFAULT_Y if m in df.columns]
    unknown = [m for m in metrics if m not in df.columns or m in params or m == "point_id"]
    if unknown or not metrics:
        have = [c for c in df.columns if c not in params and c != "point_id"]
        raise InputError(
            f"--y {' '.join(unknown)}: not a metric column (have: {', '.join(have)})", source=source
        )
    groups = [c for c in varying if c not in (x, "seed")]
    data = aggregate(df, [x, *groups], metrics).sort_values(x)
    data = data.rename(columns={f"{m}_mean": m for m in metrics})
    seeds = int(data["seeds"].min())
    title = f"{', '.join(_label(m) for m in metrics)} vs {x}"
    fig, axes = _figure(len(metrics), title + (f" (mean and 95% interval over {seeds} seeds)" if seeds > 1 else ""),
                        width=4.6)  # fmt: skip
    line_sets = data.groupby(groups, dropna=False) if groups else [((), data)]
    for i, (label, part) in enumerate(_merge_identical(line_sets, groups, x, metrics)):
        # Lines that still cross or touch stay visible: each gets its own dash and marker.
        style = {"marker": MARKERS[i % len(MARKERS)], "linestyle": DASHES[i % len(DASHES)],
                 "markersize": max(9 - 1.5 * i, 3)}  # fmt: skip
        for ax, m in zip(axes, metrics):
            if seeds > 1:
                ax.errorbar(part[x], part[m], yerr=[part[m] - part[f"{m}_lo"], part[f"{m}_hi"] - part[m]],
                            capsize=3, label=label, **style)  # fmt: skip
            else:
                ax.plot(part[x], part[m], label=label, **style)
    for ax, m in zip(axes, metrics):
        ax.set_xlabel(f"{x} (tokens)" if x.endswith("_threshold") else x)
        ax.set_ylabel(METRIC_LABELS.get(m, m))
        ax.set_title(_label(m))
        _value_axis(ax, m)
        if pd.api.types.is_numeric_dtype(data[x]) and data[x].min() > 0 and data[x].max() / data[x].min() >= 16:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(data[x].unique()), [str(v) for v in sorted(data[x].unique())])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    if groups:  # below the panels, so no line is hidden behind it
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 3),
                   fontsize="small", frameon=False)  # fmt: skip
    return fig


def _merge_identical(line_sets, groups: list[str], x: str, metrics: list[str]) -> list[tuple[str | None, pd.DataFrame]]:
    """One line per distinct series: lines whose every point is equal (a parameter with no effect) would be
    drawn on top of each other, so they are drawn once and the legend names them all as identical."""
    merged: dict[bytes, tuple[list[tuple], pd.DataFrame]] = {}
    for key, part in line_sets:
        key = key if isinstance(key, tuple) else (key,)
        sig = part[[x, *metrics]].round(12).to_numpy().tobytes()
        merged.setdefault(sig, ([], part))[0].append(key)
    short = [g.rsplit(".", 1)[-1] for g in groups]
    out: list[tuple[str | None, pd.DataFrame]] = []
    for keys, part in merged.values():
        if not groups:
            out.append((None, part))
            continue
        if len(groups) == 1:
            label = f"{short[0]}=" + ", ".join(str(k[0]) for k in keys)
        else:
            label = " | ".join(", ".join(f"{g}={v}" for g, v in zip(short, k)) for k in keys)
        out.append((label + (" (identical lines)" if len(keys) > 1 else ""), part))
    return out


def _value_axis(ax, metric: str) -> None:
    """Read from zero, as a ratio is read; shares in percent, as the tables print them; counts with separators."""
    from matplotlib.ticker import FuncFormatter

    top = max((float(np.nanmax(line.get_ydata())) for line in ax.get_lines() if len(line.get_ydata())), default=0)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1)
    if metric.startswith(("hit_", "util_")):
        _percent_axis(ax)
    else:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"))


def _percent_axis(ax) -> None:
    """Shares in percent, with as many decimals as the axis's span needs for its ticks to differ (a 0-4% axis
    labelled in whole percent reads 0%, 0%, 1%, 2%, 2%...)."""
    from matplotlib.ticker import PercentFormatter

    lo, hi = ax.get_ylim()
    span = (hi - lo) * 100
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0 if span >= 10 else 1 if span >= 1 else 2))


def _label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric).split(" (")[0]


# ------------------------------------------------------------------------------------------ misses


def read_misses(path: Path) -> pd.DataFrame:
    return _read(path, MISSES_COLUMNS)


def plot_misses(df: pd.DataFrame):
    """Mean misses per step vs step, and the per-row miss distribution, per (policy, device_buffer_size)."""
    configs = sorted(df.groupby(["policy", "device_buffer_size"]).groups, key=lambda k: (str(k[0]), k[1]))
    # the box panel as wide as its boxes need: one configuration is one narrow box, not a wide empty axis
    fig, (line_ax, box_ax) = _figure(2, "HiSparse hot-buffer misses", width=6.0, height=4.4,
                                     ratios=[1.0, min(1.0, 0.2 + 0.12 * len(configs))])  # fmt: skip
    dists, labels, colours = [], [], []
    gaps: set[tuple[int, int]] = set()
    for i, (policy, size) in enumerate(configs):
        part = df[(df["policy"] == policy) & (df["device_buffer_size"] == size)]
        label, colour = f"{policy}, {size:,} slots", f"C{i % 10}"
        mean = part.groupby("step")["misses"].mean()
        steps = mean.index.to_numpy()
        # Only windows of consecutive steps are simulated: a line within each, none across the gaps between.
        cuts = np.flatnonzero(np.diff(steps) > 1) + 1
        values = mean.to_numpy()
        for j, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(steps)])):
            line_ax.plot(steps[lo:hi], values[lo:hi], label=label if j == 0 else None, color=colour, linewidth=1.2)
            if len(cuts):  # a marker per window, its mean: a window can be too narrow to see at full scale
                line_ax.plot([(steps[lo] + steps[hi - 1]) / 2], [values[lo:hi].mean()], marker="o", color=colour,
                             markersize=5, markeredgecolor="k", markeredgewidth=0.5, linestyle="none",
                             label="window mean" if i == 0 and j == 0 else None)  # fmt: skip
        gaps.update((int(steps[c - 1]), int(steps[c])) for c in cuts)
        dists.append(part["misses"].to_numpy())
        labels.append(label)
        colours.append(colour)
    over = " over requests and layers" if {"request", "layer"} & set(df.columns) else ""
    line_ax.set(
        xlabel="decode step", ylabel="misses per step (C4 tokens)", title=f"Mean misses per step{over}"
    )
    _misses_scale(line_ax, df)
    for k, (a, b) in enumerate(sorted(gaps)):
        line_ax.axvspan(a, b, color="grey", alpha=0.12, linewidth=0, label="steps not simulated" if k == 0 else None)
    _legend_below(line_ax)
    line_ax.grid(alpha=0.3)
    boxes = box_ax.boxplot(dists, showfliers=False, patch_artist=True)
    for box, colour in zip(boxes["boxes"], colours):
        box.set(facecolor=colour, alpha=0.5)
    box_ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20, ha="right")
    box_ax.set(xlabel="policy, device_buffer_size", ylabel="misses per step (C4 tokens)",
               title="Distribution\n(outliers hidden)")  # fmt: skip
    box_ax.set_ylim(bottom=0)
    box_ax.grid(alpha=0.3, axis="y")
    if not df["misses"].any():  # two empty panels would say nothing: say why they are empty
        for ax in (line_ax, box_ax):
            ax.text(0.5, 0.5, "no misses: every top-k row\nwas in the hot buffer", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
    fig.set_layout_engine("constrained")  # lays the legend below its panel out with the labels
    return fig


def _misses_scale(ax, df: pd.DataFrame) -> None:
    """The y axis for the steps after each window's first: a window starts on a cold hot buffer, whose first
    step misses every top-k row, and that one step would set the scale and flatten everything else. The cut
    peak is said on the panel."""
    mean = df.groupby(["policy", "device_buffer_size", "step"])["misses"].mean()
    steps = mean.index.get_level_values("step").to_numpy()
    first = np.r_[True, np.diff(steps) != 1]  # the first step of each run of consecutive steps
    rest, peak = mean.to_numpy()[~first], mean.max()
    top = rest.max() if len(rest) else 0.0
    if top > 0 and peak > 2 * top:
        ax.set_ylim(0, top * 1.3)
        ax.text(0.99, 0.97, f"first steps (cold buffer) up to {peak:,.0f}: off the scale", ha="right", va="top",
                fontsize=8, color="0.3", transform=ax.transAxes)  # fmt: skip
    else:
        ax.set_ylim(bottom=0)


# ------------------------------------------------------------------------------------------ occupancy


def read_timeseries(path: Path) -> pd.DataFrame:
    summary = _run_summary(path) or {}  # a bare timeseries.parquet plots without capacity lines
    if summary.get("role") in ("decode", "colocated"):
        raise InputError("no occupancy to plot: this is a decode instance's run (HiSparse), whose time series "
                         "holds its decode steps, not the cache pools; plot misses instead", source=str(path))  # fmt: skip
    df = _read(path, OCCUPANCY_COLUMNS)
    capacity = summary.get("capacity_pages")
    if capacity:
        df.attrs["capacity"] = capacity
    df.attrs["dp_ranks"] = summary.get("dp_attention_ranks") or 1  # the series' "instance" is a rank then
    client = summary.get("client") if isinstance(summary.get("client"), dict) else {}
    if client.get("measured_from_s"):  # a lane replay's warm-up ends where its measured phase starts
        df.attrs["warmup_end_s"] = client["measured_from_s"]
    return df


def _run_summary(path: Path) -> dict | None:
    """The ``summary.json`` beside a run's parquet file, or None where there is none to read."""
    try:
        summary = json.loads((path.parent / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def plot_occupancy(df: pd.DataFrame):
    """L1 and L2 pages used (kv and swa), L3 pages held when a run has L3, and queue lengths over time, one
    colour per instance (past ``MAX_INSTANCE_LINES`` instances, their mean with the band from the least to
    the most, as one line each would not be told apart); each pool's capacity (one instance's) drawn where the
    summary gives it (the SWA pool is often the limit that binds)."""
    from matplotlib.ticker import MaxNLocator

    l3 = "l3_pages" in df.columns
    instances = sorted(df["instance"].unique())
    banded = len(instances) > MAX_INSTANCE_LINES
    dp = df.attrs.get("dp_ranks") or 1
    unit = "DP-attention rank" if dp > 1 else "instance"  # with DP attention, each series is one rank's pools
    whole = f" of {plural(max(1, len(instances) // dp), 'instance')}" if dp > 1 else ""
    fig, axes = _figure(4 if l3 else 3, "Cache occupancy and queues" + (
        f" ({len(instances)} {unit}s{whole}: mean, band from least to most)" if banded else
        f" ({len(instances)} {unit}s{whole})" if dp > 1 else ""), width=5.0)
    capacity = df.attrs.get("capacity") or {}
    colours = [f"C{i % 10}" for i in range(len(instances))]
    one = len(instances) == 1  # one instance: a colour per series (kv, swa, ...), else one per instance
    panels = [
        (axes[0], "L1 (GPU) pages used", [("l1_kv_pages", "kv", "-"), ("l1_swa_pages", "swa", "--")],
         [("l1", "kv capacity", ":"), ("l1_swa", "swa capacity", "-.")]),
        (axes[1], "L2 (host) pages used", [("l2_kv_pages", "kv", "-"), ("l2_swa_pages", "swa", "--")],
         [("l2", "kv capacity", ":"), ("l2_swa", "swa capacity", "-.")]),
    ]
    if l3:
        panels.append((axes[2], "L3 (shared storage) pages held", [("l3_pages", "pages", "-")],
                       [("l3", "capacity", ":")]))
    panels.append((axes[-1], "Scheduler queues", [("running", "running", "-"), ("waiting", "waiting", "--")], None))
    for ax, title, series, limits in panels:
        shared = series[0][0] == "l3_pages"  # one store for every instance
        if banded and not shared:
            by_time = df.groupby("time_s", sort=True)
            for k, (col, name, style) in enumerate(series):
                colour = f"C{k}"
                band = by_time[col].agg(["mean", "min", "max"])
                ax.plot(band.index, band["mean"], linestyle=style, color=colour, label=f"{name}, mean", linewidth=1.2)
                ax.fill_between(band.index, band["min"], band["max"], color=colour, alpha=0.2, linewidth=0)
        else:
            for inst, colour in zip(instances[:1] if shared else instances, colours):
                part = df[df["instance"] == inst].sort_values("time_s")
                for k, (col, name, style) in enumerate(series):
                    label = f"{name}, {unit} {inst}" if len(instances) > 1 and not shared else name
                    ax.plot(part["time_s"], part[col], linestyle=style, color=f"C{k}" if one or shared else colour,
                            label=label, linewidth=1.2, zorder=3)  # fmt: skip
        for key, name, style in limits or []:
            if capacity.get(key):  # under the series: a pool full to its capacity stays visible on its line
                ax.axhline(capacity[key], color="grey", linestyle=style, label=f"{name} ({capacity[key]:,})",
                           zorder=1, linewidth=2.5, alpha=0.5)  # fmt: skip
            elif key in capacity and capacity[key] is None:
                ax.plot([], [], " ", label=f"{name}: unbounded")
        if "warmup_end_s" in df.attrs:
            ax.axvline(df.attrs["warmup_end_s"], color="k", linestyle=":", linewidth=1, label="warm-up ends")
        ax.set(xlabel="simulated time (s)", ylabel="requests" if limits is None else "pages", title=title)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        _legend_below(ax)
    fig.set_layout_engine("constrained")  # lays the legend below its panel out with the labels
    return fig


# --------------------------------------------------------------------------------------------- rounds


def read_rounds(path: Path) -> pd.DataFrame:
    """The records, with the client that grouped them (from the run's ``summary.json``): rounds of
    bench_multiturn or steps of bench_serving. A run without either has nothing to plot by round."""
    df = _read(path, ROUNDS_COLUMNS)
    summary = _run_summary(path)  # None: a bare requests.parquet, plotted by rounds if it has more than one
    client = None if summary is None else (summary.get("client") or {}).get("client", "")
    if client in ("bench_multiturn", "bench_serving") or (client is None and df["round"].nunique() >= 2):
        df.attrs["client"] = client or "bench_multiturn"
        return df
    what = ("a lane replay's calls come in sessions, not rounds (its AgentX figures are in summary.json)"
            if client == "aiperf_agentic" else "this run's workload has no bench_multiturn rounds or bench_serving steps")
    instead = "plot misses shows its decode steps" if summary and summary.get("role") in ("decode", "colocated") else (
        "plot occupancy shows a run over time")
    raise InputError(f"no rounds to plot: {what} ({instead})", source=str(path))


def plot_rounds(df: pd.DataFrame):
    """The client's view by round (bench_multiturn) or step (bench_serving): TTFT, mean and the tail its own
    report prints, as it computes it (bench_multiturn's p90 at rank 0.9 n, bench_serving's interpolated p99),
    and the cache hit rate by source."""
    from matplotlib.ticker import MaxNLocator

    from sim.serve.clients import rank_quantile

    serving = df.attrs.get("client") == "bench_serving"
    unit, tail = ("step", 0.99) if serving else ("round", 0.9)
    g = df.groupby("round", sort=True)
    rounds = list(g.groups)
    fig, (ax_t, ax_h) = _figure(2, f"Per {unit} ({'bench_serving steps' if serving else 'bench_multiturn rounds'})")
    ax_t.plot(rounds, g["ttft_s"].mean(), marker="o", label="mean")
    tails = g["ttft_s"].quantile(tail) if serving else g["ttft_s"].agg(lambda v: rank_quantile(v.to_numpy(float), tail))
    ax_t.plot(rounds, tails, marker="s", linestyle="--", label=f"p{tail * 100:.0f}")
    ax_t.set(xlabel=unit, ylabel="TTFT (s)", title="Time to first token")
    inputs = g["input_tokens"].sum()
    bottom = pd.Series(0.0, index=inputs.index)
    for col, name in (("device_hit_tokens", "device (L1)"), ("host_hit_tokens", "host (L2)"),
                      ("storage_hit_tokens", "storage (L3)")):  # fmt: skip
        share = g[col].sum() / inputs
        ax_h.bar(rounds, share, bottom=bottom, label=name)
        bottom += share
    ax_h.set(xlabel=unit, ylabel="share of input tokens (first admission)", title="Cache hit rate", ylim=(0, 1))
    _percent_axis(ax_h)
    if not bottom.any():
        ax_h.text(0.5, 0.5, f"no cache hits in any {unit}", transform=ax_h.transAxes, ha="center", va="center",
                  color="dimgrey")  # fmt: skip
    for ax in (ax_t, ax_h):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    ax_t.set_ylim(bottom=0)
    fig.tight_layout()
    return fig


KINDS: dict[str, tuple[Callable[[Path], pd.DataFrame], str, Callable]] = {
    "threshold": (read_sweep, "sweep.parquet", plot_threshold),
    "misses": (read_misses, "misses.parquet", plot_misses),
    "occupancy": (read_timeseries, "timeseries.parquet", plot_occupancy),
    "rounds": (read_rounds, "requests.parquet", plot_rounds),
    "ages": (read_ages, "summary.json", plot_ages),
}


# ------------------------------------------------------------------------------------------ compare


def plot_compare(df: pd.DataFrame, out: str | Path) -> Path:
    """Hit rate vs L1 capacity, one line per policy, one panel per L2 setting (``hicache-sim compare``).

    The y axis is the L1+L2 hit rate by whole input pages (the L1 hit rate where L2 is off), in percent as the
    table prints it, from zero and on one scale for every panel so the panels compare. Policies whose lines
    coincide in a panel are drawn once and named together.
    """
    out = Path(out)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise InputError(f"--plot must end in .png or .svg, got {out.name!r}")
    fig = compare_figure(df)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
    return out


def compare_figure(df: pd.DataFrame):
    """The figure :func:`plot_compare` writes."""
    from matplotlib.ticker import NullLocator

    settings = list(dict.fromkeys(df["l2"]))
    fig, axes = _figure(len(settings), "hit rate vs L1 capacity (a panel per L2 setting, a line per policy)")
    top = float(df["l1l2_hit_pages"].max()) * 1.1 or 1.0
    policies = list(dict.fromkeys(df["policy"]))
    for ax, setting in zip(axes, settings):
        part = df[df["l2"] == setting]
        lines: dict[bytes, tuple[list[str], pd.DataFrame]] = {}
        for policy in policies:
            rows = part[part["policy"] == policy].sort_values("l1_pages")
            sig = rows[["l1_pages", "l1l2_hit_pages"]].round(12).to_numpy().tobytes()
            lines.setdefault(sig, ([], rows))[0].append(policy)
        for names, rows in lines.values():
            i = policies.index(names[0])
            dash = ":" if names[0] == "clairvoyant" else DASHES[i % len(DASHES)]
            label = names[0] if len(names) == 1 else f"{' = '.join(names)} (identical)"
            ax.plot(rows["l1_pages"], rows["l1l2_hit_pages"], dash, marker=MARKERS[i % len(MARKERS)],
                    color=f"C{i % 10}", label=label)  # fmt: skip
        ax.set_xscale("log")
        ticks = sorted(df["l1_pages"].unique())
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())  # only the capacities simulated: no colliding log labels
        ax.set_ylim(0, top)
        _percent_axis(ax)
        ax.set_xlabel("L1 capacity (pages)")
        ax.set_ylabel("L1+L2 hit rate (input pages)" if setting != "0" else "L1 hit rate (input pages)")
        ax.set_title("L2 off" if setting == "0" else f"L2 = {setting} pages" if not setting.endswith("x") else f"L2 = {setting} L1")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
