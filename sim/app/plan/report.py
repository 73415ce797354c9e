"""The plan's report folder: ``report.md`` with its PNGs, and the same numbers as ``plan.json`` and CSVs.

Everything printed or drawn is read from the plan's data (:func:`sim.app.plan.build.make_plan`), so a test can
check the data and the prose can only repeat it. Error bars are the 95% Student-t intervals over seeds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sim.app.plan import l3value, tierages

__all__ = ["write_report"]

GB = 1e9


def _fig(nrows: int = 1, ncols: int = 1, size=(7.0, 4.0)):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=110, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _err(points: list[dict], metric: str, scale: float = 1.0):
    """Means and error-bar lengths (below, above) of ``metric``; no figure here is below zero, so the
    interval's lower end is clipped at 0, in every chart as in the tables."""
    means = [p[metric]["mean"] * scale if metric in p else math.nan for p in points]
    lo = [max(0.0, p[metric]["mean"] - max(p[metric]["lo"], 0.0)) * scale if metric in p else 0 for p in points]
    hi = [(p[metric]["hi"] - p[metric]["mean"]) * scale if metric in p else 0 for p in points]
    return means, [lo, hi]


def _fmt_gb(b: float) -> str:
    return f"{b / GB:,.2f}"


def _pct(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def _iv(p: dict, m: str, f: str = "{:.3f}", scale: float = 1.0) -> str:
    if m not in p:
        return "-"
    x = p[m]
    if x["n"] < 2:
        return f.format(x["mean"] * scale)
    lo = max(x["lo"], 0.0)  # no figure here is below zero: the interval's lower end is shown clipped
    return f"{f.format(x['mean'] * scale)} [{f.format(lo * scale)}, {f.format(x['hi'] * scale)}]"


def _table(heads: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(heads) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(heads))) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ figures


def _plot_host(data: dict, path: Path) -> None:
    h = data["host_memory"]
    cands = h["candidates"]
    fig, ax = _fig(size=(7.5, 4.0))
    ax = ax[0][0]
    names = [c["label"].removeprefix("--hicache-") for c in cands]
    bottom = [0.0] * len(cands)
    for pool in h["pools"]:
        vals = [c["pool_bytes_per_rank"].get(pool["name"], 0) * c["ranks_per_node"] / GB for c in cands]
        ax.bar(names, vals, bottom=bottom, label=pool["name"])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.axhline(h["node_dram_gb"], color="k", lw=1, label=f"node DRAM ({h['node_dram_gb']:g} GB)")
    budget = cands[0]["budget_per_rank"] * cands[0]["ranks_per_node"] / GB if cands else 0
    ax.axhline(budget, color="r", ls="--", lw=1, label="SGLang's limit (DRAM - 10 GiB)")
    for i, c in enumerate(cands):
        if c["status"] == "refused":  # drawn on the axis: a refused row may pin nothing (log scale)
            ax.text(i, 0.03, "refused\nby SGLang", ha="center", va="bottom", color="r", fontsize=8,
                    transform=ax.get_xaxis_transform())  # fmt: skip
    ax.set_ylabel("pinned host memory per node (GB)")
    ranks = cands[0]["ranks_per_node"] if cands else 1
    ax.set_title(f"Host pools per node ({ranks} rank{'s' if ranks > 1 else ''}), pool by pool")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_yscale("log")
    shown = [v for c in cands for v in c["pool_bytes_per_rank"].values() if v]
    if shown:  # down to the smallest pool drawn, so no stacked segment falls below the axis
        ax.set_ylim(bottom=min(shown) * cands[0]["ranks_per_node"] / GB / 2)
    ax.legend(fontsize=7, ncols=2)
    fig.savefig(path)


def _plot_value(data: dict, path: Path) -> None:
    v = data["value"]
    pts = v["points"]
    x = [p["host_bytes_per_node"] / GB for p in pts]
    fig, axes = _fig(1, 3, size=(13.0, 4.0))
    a, b, c = axes[0]
    curve = v["curve"]
    cx = [p["host_gb_per_node"] for p in curve]
    if any(p["replay_l1l2"] is not None for p in curve):
        a.plot(cx, [p["replay_l1l2"] for p in curve], "-", color="C0", label="L1 + L2, request-order replay")
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
        a.axvline(v["knee_gb_per_node"], color="C3", lw=0.8, ls="--", label=f"knee {v['knee_gb_per_node']:.2f} GB")
    cands = data["host_memory"]["candidates"]
    limit = cands[0]["budget_per_rank"] * cands[0]["ranks_per_node"] / GB if cands else math.inf
    if cx and limit < max(cx):
        a.axvspan(limit, max(cx), color="0.9", zorder=0, label="past SGLang's limit: does not start")
    a.set_ylabel("hit rate (share of input tokens)")
    a.set_title("Hit rate vs host memory")
    a.legend(fontsize=7)
    m, e = _err(pts, "input_tokens_per_s")
    b.errorbar(x, m, yerr=e, fmt="o-", capsize=3)
    b.set_ylabel("input throughput (tokens/s)")
    b.set_title("Throughput vs host memory")
    for metric, style, lab in (("ttft_p90_s", "o-", "TTFT p90"), ("ttft_mean_s", "s--", "TTFT mean")):
        m, e = _err(pts, metric)
        c.errorbar(x, m, yerr=e, fmt=style, capsize=3, label=lab)
    if "ttft_p90_s" in data["slo"]:
        c.axhline(data["slo"]["ttft_p90_s"], color="r", lw=1, label="SLO TTFT p90")
    c.set_ylabel("TTFT (s)")
    c.set_title("TTFT vs host memory")
    c.legend(fontsize=7)
    for ax in (a, b, c):
        ax.set_xlabel("pinned host memory per node (GB)")
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.08)  # headroom: a ceiling line is not the frame
    fig.savefig(path)


def _plot_bars(rows: list[dict], labels: list[str], panels: list[tuple[str, str, float]], title: str,
               path: Path) -> None:  # fmt: skip
    fig, axes = _fig(1, len(panels), size=(3.6 * len(panels), 3.6))
    for ax, (metric, ylabel, scale) in zip(axes[0], panels):
        if rows and isinstance(rows[0].get(metric), dict):
            m, e = _err(rows, metric, scale)
            ax.bar(labels, m, yerr=e, capsize=3)
        else:
            ax.bar(labels, [(r.get(metric) or 0) * scale for r in rows])
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.suptitle(title)
    fig.savefig(path)


def _plot_l3(data: dict, path: Path) -> None:
    rows = data["l3"]["rows"]
    policies = list(dict.fromkeys(r["prefetch_policy"] for r in rows))
    thresholds = list(dict.fromkeys(r["prefetch_threshold"] for r in rows))
    panels = (("hit_storage", "L3 hit rate (share of input tokens)"), ("prefetches", "prefetches per run"),
              ("cut_below_threshold", "tokens cut by the threshold"))  # fmt: skip
    fig, axes = _fig(1, 3, size=(12.0, 3.6))
    width = 0.8 / len(policies)
    for ax, (metric, ylabel) in zip(axes[0], panels):
        for i, pol in enumerate(policies):
            sel = [next(r for r in rows if r["prefetch_policy"] == pol and r["prefetch_threshold"] == t) for t in thresholds]
            xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(thresholds))]
            if isinstance(sel[0].get(metric), dict) or metric == "hit_storage":
                m, e = _err(sel, metric)
                ax.bar(xs, m, width, yerr=e, capsize=2, label=pol)
            else:
                ax.bar(xs, [r.get(metric) or 0 for r in sel], width, label=pol)
        ax.set_xticks(range(len(thresholds)), [str(t) for t in thresholds])
        ax.set_xlabel("prefetch threshold (tokens)")
        ax.set_ylabel(ylabel)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"L3 prefetch at {data['l3']['candidate']} (error bars: 95% interval, clipped at 0)")
    fig.savefig(path)


def _plot_swa(data: dict, path: Path) -> None:
    rows = data["swa"]["rows"]
    fig, ax = _fig(size=(6.5, 4.0))
    ax = ax[0][0]
    r = [row["swa_full_tokens_ratio"] for row in rows]
    for tier, color in (("l1", "C0"), ("l1l2", "C1")):
        if f"{tier}_hit_v4" in rows[0]:
            name = "L1" if tier == "l1" else "L1 + L2"
            ax.plot(r, [row[f"{tier}_hit_v4"] for row in rows], "o-", color=color, label=f"{name}: V4 (FULL + SWA)")
            ax.plot(r, [row[f"{tier}_hit_no_window"] for row in rows], "s--", color=color,
                    label=f"{name}: same Full pages, no window")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("swa_full_tokens_ratio (SWA pool / Full pool tokens; same KV bytes)")
    ax.set_ylabel("hit rate (share of input tokens)")
    ax.set_ylim(bottom=0)
    ax.set_title("Hit rate lost to the SWA pool")
    ax.legend(fontsize=7)
    fig.savefig(path)


def _plot_hisparse(data: dict, path: Path) -> None:
    h = data["hisparse"]
    rows = [r for r in h["rows"] if r["on_output_tok_s"] is not None and r["off_output_tok_s"] is not None]
    fig, ax = _fig(size=(6.5, 4.0))
    ax = ax[0][0]
    b = [r["batch_cap"] for r in rows]
    ax.plot(b, [r["on_output_tok_s"] for r in rows], "o-", label="HiSparse on")
    ax.plot(b, [r["off_output_tok_s"] for r in rows], "s--", label="HiSparse off")
    if h["crossover_batch"] is not None:
        ax.axvline(h["crossover_batch"], color="r", lw=0.8, ls="--", label=f"crossover: batch {h['crossover_batch']}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(b, [str(x) for x in b])
    ax.set_xlabel("decode batch cap (--max-running-requests)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"HiSparse on {h['scenario']}")
    ax.legend(fontsize=7)
    fig.savefig(path)


# ------------------------------------------------------------------------------------------ writing


def _csvs(data: dict, folder: Path) -> list[str]:
    host = pd.DataFrame([{k: v for k, v in c.items() if k != "pool_bytes_per_rank"}
                         | {f"pool_{p}_bytes_per_rank": b for p, b in c["pool_bytes_per_rank"].items()}
                         for c in data["host_memory"]["candidates"]])  # fmt: skip
    frames = {"host_memory": host, "value_curve": pd.DataFrame(data["value"]["curve"]),
              "value_points": pd.json_normalize(data["value"]["points"]),
              "write_policy": pd.json_normalize(data["write_policy"]["rows"]),
              "l3": pd.json_normalize(data["l3"]["rows"]),
              "l3_marginal": pd.json_normalize(data["l3"].get("marginal", {}).get("rows", []))}  # fmt: skip
    if data["swa"].get("applies"):
        frames["swa"] = pd.DataFrame(data["swa"]["rows"])
    if data["hisparse"].get("applies"):
        frames["hisparse"] = pd.DataFrame(data["hisparse"]["rows"])
    names = []
    for name, df in frames.items():
        df.to_csv(folder / f"{name}.csv", index=False)
        names.append(f"{name}.csv")
    return names


def _json(data: dict) -> str:
    def clean(v):
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if hasattr(v, "item"):
            return clean(v.item())
        return v

    return json.dumps(clean(data), indent=1, allow_nan=False) + "\n"


def write_report(data: dict, folder: Path, *, command: str = "") -> list[str]:
    """Write ``report.md``, ``plan.json``, the CSVs and the PNGs into ``folder`` (a staging folder)."""
    (folder / "plan.json").write_text(_json(data))
    names = ["report.md", "plan.json", *_csvs(data, folder)]
    _plot_host(data, folder / "host_memory.png")
    _plot_value(data, folder / "value.png")
    names += ["host_memory.png", "value.png"]
    wp = data["write_policy"]["rows"]
    if wp:
        _plot_bars(wp, [r["policy"] for r in wp], [("hit_total", "hit rate", 1.0), ("ttft_p90_s", "TTFT p90 (s)", 1.0),
                   ("d2h_bytes", "D2H copied (GB)", 1 / GB)], f"Write policy at {data['write_policy']['candidate']} (error bars: 95% interval, clipped at 0)",
                   folder / "write_policy.png")  # fmt: skip
        names.append("write_policy.png")
    l3 = data["l3"]["rows"]
    if l3:
        _plot_l3(data, folder / "l3.png")
        names.append("l3.png")
    if data["swa"].get("applies"):
        _plot_swa(data, folder / "swa.png")
        names.append("swa.png")
    if data["hisparse"].get("applies"):
        _plot_hisparse(data, folder / "hisparse.png")
        names.append("hisparse.png")
    (folder / "report.md").write_text(_markdown(data, command))
    return names


def _markdown(d: dict, command: str) -> str:
    """The report, section by section: the recommendation first, since it is what the reader came for."""
    out = _md_header(d, command) + _md_recommendation(d) + _md_host_memory(d["host_memory"]) + _md_value(d["value"])
    out += _md_write_policy(d["write_policy"]) + _md_l3(d["l3"]) + _md_parts(l3value.markdown(d["l3"].get("marginal")))
    out += _md_parts(tierages.markdown(d["tier_ages"])) if "tier_ages" in d else []
    out += _md_swa(d["swa"]) + _md_hisparse(d["hisparse"])
    if d["failed_runs"]:
        out += ["## Failed runs", ""] + [f"- {' '.join(f['key'])}: {f['error']}" for f in d["failed_runs"]] + [""]
    out += ["Data: `plan.json` (everything above), CSVs per section. Regenerate with the command at the top."]
    return "\n".join(out) + "\n"


def _md_parts(parts: dict | None) -> list[str]:
    """A section another module words (its lead-in, column heads, rows), laid out as the others are."""
    return parts["intro"] + [_table(parts["heads"], parts["rows"]), ""] if parts else []


def _md_notes(section: dict) -> list[str]:
    return [f"- note: {n}" for n in section.get("notes", [])] + ([""] if section.get("notes") else [])


def _md_header(d: dict, command: str) -> list[str]:
    slo = ", ".join(f"{k} <= {t:g} s" for k, t in d["slo"].items()) or "none"
    seeds = ("seed " if len(d["seeds"]) == 1 else "seeds ") + ", ".join(map(str, d["seeds"]))
    model = "" if d["model"] == d["scenario"] else f"{d['model']}, "
    out = [f"# Plan: {d['scenario']} ({model}{d['pools']} pools)", ""]
    if command:
        out += ["```", command, "```", ""]
    out += [f"{d['runs']} runs ({len(d['failed_runs'])} failed), {seeds}; SLOs: {slo}. Intervals are 95% "
            "Student-t over seeds: `mean [lo, hi]` (lower ends clipped at 0).", ""]  # fmt: skip
    return out + _md_notes(d)


def _md_recommendation(d: dict) -> list[str]:
    rec = d["recommendation"]
    out = ["## Recommendation", ""]
    if rec["choice"] is None:
        out += [f"**No candidate meets the SLOs** ({rec['criterion']}).", ""]
    else:
        out += [f"**{rec['choice']}**: {rec['criterion']}; pins {_fmt_gb(rec['host_bytes_per_node'])} GB per node.",
                "", "```", rec["launch"], "```", ""]  # fmt: skip
        out += _md_notes(rec)
    if not d["slo"]:
        return out
    heads = ["candidate", "host GB / node", *[f"{m} (upper / target)" for m in d["slo"]], "meets"]
    rows = []
    for vd in rec["verdicts"]:
        cells = [vd["label"], _fmt_gb(vd["host_bytes_per_node"])]
        for m in d["slo"]:
            c = vd["checks"].get(m)
            cells.append("-" if c is None else f"{c['upper']:.3f} / {c['target']:g}")
        cells.append("yes" if vd["meets"] else "no")
        rows.append(cells)
    return out + [_table(heads, rows), ""]


def _md_host_memory(h: dict) -> list[str]:
    out = ["## Host memory", "", "![host memory](host_memory.png)", "",
           f"Pinned host pools per rank and per node ({h['tp_size']} TP rank{'s' if h['tp_size'] > 1 else ''}, "
           f"{h['gpus_per_node']} GPUs per node) "
           f"for each candidate, against {h['node_dram_gb']:g} GB of node DRAM and SGLang's start-up check (a rank "
           "may pin the available memory less a 10 GiB reserve over the ranks on the node; "
           "`srt/mem_cache/pool_host/base.py:84-108, 248-257`). L1 holds "
           f"{h['l1_pages']:,} Full pages of {h['page_tokens']} tokens. "
           + (f"With neither `--hicache-ratio` nor `--hicache-size`, SGLang's auto-sizing would pick ratio "
              f"{h['auto_ratio']:.3g} (`mem_cache/hicache_auto_size.py:86-118`)." if h["auto_ratio"] is not None else
              "SGLang cannot auto-size this model's host pools: without `--hicache-ratio` HiCache does not start "
              "(`mem_cache/hicache_auto_size.py:63-72`)."), ""]  # fmt: skip
    pools = [p["name"] for p in h["pools"]]
    rows = [[c["label"], f"{c['l2_pages']:,}", *[_fmt_gb(c["pool_bytes_per_rank"].get(p, 0)) for p in pools],
             _fmt_gb(c["bytes_per_rank"]), _fmt_gb(c["bytes_per_node"]), c["status"] + (f": {c['reason']}" if c["reason"] else "")]
            for c in h["candidates"]]  # fmt: skip
    return out + [_table(["candidate", "L2 Full pages", *[f"{p} GB/rank" for p in pools], "GB / rank", "GB / node",
                          "SGLang"], rows), ""]  # fmt: skip


def _md_value(v: dict) -> list[str]:
    out = ["## The value of host memory", "", "![value of host memory](value.png)", "",
           f"Left: hit rate against pinned host GB per node; the line is {v['curve_method']}"
           + (f" ({v['curve_reason']})" if v["curve_reason"] else "")
           + (f"; its largest gap to the replays is {100 * v['one_pass_max_gap']:.2f} points" if v["one_pass_max_gap"] is not None else "")
           + ". Replays serve the requests in order (a multi-turn workload round by round, clients in turn: "
           "LRU's worst case), the timed runs in the client's own order, so the two can differ. "
           "The clairvoyant ceiling is Belady's rule over L1 + L2 pages (no eviction policy does better; for "
           "DeepSeek-V4 it ignores the window, so it is a ceiling on Full-page hits). Dots: timed runs with their "
           "95% intervals. "
           + (f"The hit curve bends most at **{v['knee_gb_per_node']:.2f} GB per node** (the knee)."
              if v["knee_gb_per_node"] is not None else "The curve has no knee (flat or too few points)."), ""]  # fmt: skip
    rows = [[p["label"], _fmt_gb(p["host_bytes_per_node"]), _iv(p, "hit_device", "{:.1%}"), _iv(p, "hit_host", "{:.1%}"),
             _iv(p, "input_tokens_per_s", "{:,.0f}"), _iv(p, "ttft_mean_s"), _iv(p, "ttft_p90_s"),
             _iv(p, "tpot_mean_s", "{:.1f}", 1e3)] for p in v["points"]]  # fmt: skip
    out += [_table(["setup", "host GB / node", "hit L1", "hit L2", "input tok/s", "TTFT mean s", "TTFT p90 s",
                    "TPOT ms"], rows), ""]  # fmt: skip
    if v["marginal"]:
        out += ["Marginal value (each step up in host memory, means):", ""]
        out += [_table(["from", "to", "+GB / node", "hit points per GB", "input tok/s per GB"],
                       [[m["from"], m["to"], f"{m['gb_per_node']:.2f}", f"{m['hit_points_per_gb']:+.2f}",
                         f"{m['input_tok_s_per_gb']:+,.0f}"] for m in v["marginal"]]), ""]  # fmt: skip
    return out


def _md_write_policy(wp: dict) -> list[str]:
    if not wp["rows"]:
        return []
    out = ["## Write policy", "", "![write policy](write_policy.png)", "",
           f"At {wp['candidate']}. Dropped tokens by SGLang's reasons (`hicache_dropped_tokens_total`).", ""]
    rows = [[r["policy"], _iv(r, "hit_total", "{:.1%}"), _iv(r, "ttft_p90_s"), _iv(r, "input_tokens_per_s", "{:,.0f}"),
             _fmt_gb(r["d2h_bytes"] or 0), ", ".join(f"{k} {v:,.0f}" for k, v in r["dropped_tokens_by_reason"].items()) or "0"]
            for r in wp["rows"]]  # fmt: skip
    return out + [_table(["policy", "hit total", "TTFT p90 s", "input tok/s", "D2H GB", "dropped tokens"], rows), ""]


def _md_l3(l3: dict) -> list[str]:
    if not l3["rows"]:
        return []
    out = ["## L3 storage", "", "![L3](l3.png)", "",
           f"L3 on, at the smallest host pool ({l3['candidate']}), where L2 evicts most. Prefetches: storage "
           "lookups that found a span past the L1 + L2 match at or above the threshold; cut: requested tokens "
           "that did not land (below the threshold, or past the timeout).", ""]  # fmt: skip
    rows = [[r["prefetch_policy"], str(r["prefetch_threshold"]), f"{r['prefetches'] or 0:,.1f}",
             f"{r['requested_tokens'] or 0:,.0f}", f"{r['cut_below_threshold'] or 0:,.0f}", f"{r['cut_deadline'] or 0:,.0f}",
             _iv(r, "hit_storage", "{:.1%}"), _iv(r, "ttft_p90_s")] for r in l3["rows"]]  # fmt: skip
    return out + [_table(["policy", "threshold", "prefetches", "requested tokens", "cut: threshold", "cut: timeout",
                          "L3 hit", "TTFT p90 s"], rows), ""]  # fmt: skip


def _md_swa(swa: dict) -> list[str]:
    if not swa.get("applies"):
        return []
    out = ["## DeepSeek-V4: hit rate lost to the SWA pool", "", "![SWA](swa.png)", "",
           "Request-order replays at each `swa_full_tokens_ratio` with the same KV bytes (a bigger SWA share "
           "leaves fewer Full pages). *No window* is the same keys on a tree without window state at the same "
           "Full pages: the gap is what the SWA pool costs (windows gone, and Full leaves its LRU deleted). "
           "What even that tree misses is split into *evicted* and *first seen* (a prefix no earlier request "
           "had: missed at any size, "
           + ("-" if swa.get("missed_first_seen") is None else f"{100 * swa['missed_first_seen']:.1f}%")
           + " of input tokens here). The one-pass curve does not apply here: the SWA validator "
           "breaks LRU's inclusion property (`docs/notes/mrc.md`).", ""]  # fmt: skip
    rows = [[f"{r['swa_full_tokens_ratio']:g}", f"{r['l1_full_pages']:,}", _pct(r.get("l1_hit_v4")),
             _pct(r.get("l1_lost_to_swa")), _pct(r.get("l1l2_hit_v4")), _pct(r.get("l1l2_lost_to_swa")),
             _pct(r.get("l1l2_missed_evicted"))] for r in swa["rows"]]  # fmt: skip
    return out + [_table(["swa ratio", "L1 Full pages", "L1 hit", "L1 lost to SWA", "L1+L2 hit", "L1+L2 lost to SWA",
                          "L1+L2 missed: evicted"], rows), ""]  # fmt: skip


def _md_hisparse(hs: dict) -> list[str]:
    out = ["## HiSparse (decode instance)", ""]
    if not hs.get("applies"):
        return out + [f"Not run: {hs['reason']}.", ""]
    out += ["![HiSparse](hisparse.png)", "",
            (f"HiSparse pays from a batch cap of **{hs['crossover_batch']}** on (the crossover)."
             if hs["crossover_batch"] is not None else "HiSparse does not pay at any batch tried."), ""]  # fmt: skip
    rows = [[str(r["batch_cap"]), f"{r['on_output_tok_s'] or 0:,.0f}", f"{r['off_output_tok_s'] or 0:,.0f}",
             f"{r['on_peak_batch'] or 0}", f"{r['off_peak_batch'] or 0}",
             "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"] for r in hs["rows"]]  # fmt: skip
    return out + [_table(["batch cap", "on tok/s", "off tok/s", "on peak batch", "off peak batch", "on / off"], rows), ""]
