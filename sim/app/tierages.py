"""The thrash diagnosis a run reports: per tier, the page ages at hit and at eviction (:mod:`sim.cache.ages`),
the lines ``run`` prints, and ``hicache-sim plot ages RUN``, which draws the two age distributions per tier.

The figures sit in ``summary.json`` under ``metrics`` (SGLang's proposed names, sgl-project/sglang#38559) and,
read out, under ``tier_ages``: per tier the median and p90 ages (log-interpolated in their buckets) and the
verdict lines (:func:`sim.cache.ages.verdicts`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sim.base.errors import InputError
from sim.base.text import seconds_text
from sim.cache.ages import EDGES, PER_DECADE, TIER_NAMES, TIERS, TierAges, median, verdicts

__all__ = ["format_lines", "plot_ages", "read_ages", "summary_section"]


def summary_section(ages: TierAges) -> dict[str, Any]:
    """``tier_ages`` in a run's summary: per tier with traffic, then which tier is too small for what."""
    return {"tiers": ages.tiers(), "verdict": verdicts(ages)}


def format_lines(section: dict[str, Any]) -> list[str]:
    """The lines ``run`` prints: per tier the median age at hit and at eviction, then the verdict."""
    lines = []
    for tier, row in section["tiers"].items():
        hit, ev = row["age_at_hit_p50_s"], row["age_at_evict_p50_s"]
        never = row["evicted_never_reused"]
        head = f"age {TIER_NAMES[tier]} hit / evict p50"
        lines.append(f"{head:<28}{_age(hit):>14} / {_age(ev)}   ({row['hit_tokens']:,} tokens hit, "
                     f"{row['evicted_tokens']:,} evicted"
                     + (f", {never:.0%} of them never reused)" if never is not None else ")"))  # fmt: skip
    return lines + [f"{'tier sizing':<28}{line}" if i == 0 else f"{'':<28}{line}"
                    for i, line in enumerate(section["verdict"])]  # fmt: skip


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return "> 1e5 s" if math.isinf(seconds) else seconds_text(seconds)


# ----------------------------------------------------------------------------------------------- plot
def read_ages(path: Path) -> TierAges:
    """A run's age histograms from its ``summary.json``."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read a run summary: {exc}", source=str(path)) from None
    metrics = summary.get("metrics") if isinstance(summary, dict) else None
    if not isinstance(metrics, dict) or "kv_age_tokens_total" not in metrics:
        raise InputError("no page ages in this summary (a run from before they were recorded, or a decode "
                         "instance): run the scenario again", source=str(path))  # fmt: skip
    ages = TierAges.from_metrics(metrics)
    ages.window_pools = bool((summary.get("capacity_pages") or {}).get("l1_swa"))
    return ages


def plot_ages(ages: TierAges):
    """One panel per tier with traffic: the tokens hit and evicted by age (log-scaled seconds), each as a share
    of its own total, so the two curves compare where their counts differ; the medians marked."""
    from matplotlib.figure import Figure  # pyplot-free, as sim.app.plot's figures

    tiers = [t for t in TIERS if any(ages.hit[t]) or any(ages.evict[t])] or [TIERS[0]]
    fig = Figure(figsize=(4.6 * len(tiers), 3.6))
    axes = list(fig.subplots(1, len(tiers), squeeze=False)[0])
    fig.suptitle("Page age at hit and at eviction, per tier", y=1.03)
    lo, hi = _span(ages)
    step = 10 ** (1 / PER_DECADE)
    centres = [math.sqrt(a * b) for a, b in zip((EDGES[0] / step, *EDGES), (*EDGES, EDGES[-1] * step))]
    for ax, tier in zip(axes, tiers):
        drawn, missing = False, []
        for name, hist, colour in (("age at hit", ages.hit[tier], "tab:blue"),
                                   ("age at eviction", ages.evict[tier], "tab:red")):  # fmt: skip
            total = sum(hist)
            if not total:
                missing.append("no hits" if name == "age at hit" else "no evictions")
                continue
            ax.step(centres[lo:hi], [n / total for n in hist[lo:hi]], where="mid", color=colour,
                    label=f"{name} ({total:,} tokens)")  # fmt: skip
            med = median(hist)
            ax.axvline(med, color=colour, linestyle=":", linewidth=1, label=f"median {name}: {seconds_text(med)}")
            drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "nothing to plot:\nno hits or evictions", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
        elif missing:  # said in the legend, below the axes, not over the data
            what = missing[0]
            if what == "no evictions" and ages.window_pools:  # a window pool's evictions keep the page's Full KV
                what = "no Full-page evictions (window-pool\nevictions are not counted)"
            ax.plot([], [], " ", label=f"{what} in this tier")
        ax.set_xscale("log")
        ax.set_xlim(centres[lo] / 2, centres[hi - 1] * 2)
        if lo == 0:  # the first bucket holds every age up to 1 ms, 0 included: not an age of 1 ms
            ax.annotate(f"<= {seconds_text(EDGES[0])}\n(all below)", (centres[0], 0), xytext=(0, 12),
                        textcoords="offset points", ha="center", fontsize=7, color="0.3")  # fmt: skip
        ax.set_ylim(bottom=0)
        ax.set_xlabel("age since last use (s, log scale)")
        ax.set_ylabel("share of the tier's tokens")
        ax.set_title(f"{TIER_NAMES[tier]} ({tier})")
        ax.grid(True, alpha=0.3)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(0, -0.22), fontsize="small", frameon=False)
    return fig


def _span(ages: TierAges) -> tuple[int, int]:
    """The bucket range any series uses, one bucket of margin each side."""
    used = [i for h in (*ages.hit.values(), *ages.evict.values()) for i, n in enumerate(h) if n]
    if not used:
        return 0, len(EDGES) + 1
    return max(0, min(used) - 1), min(len(EDGES) + 1, max(used) + 2)
