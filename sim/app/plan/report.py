"""The plan's report folder: ``report.md`` with its PNGs, and the same numbers as ``plan.json`` and CSVs.

Everything printed or drawn is read from the plan's data (:func:`sim.app.plan.build.make_plan`), so a test can
check the data and the prose can only repeat it. Error bars are the 95% Student-t intervals over seeds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sim.app.plan import figures, tierages
from sim.app.plan.figures import GB, gb_text
from sim.model.hostmem import RATIO_SEARCH_CAP

__all__ = ["write_report"]



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


# ------------------------------------------------------------------------------------------ writing


def _csvs(data: dict, folder: Path) -> list[str]:
    host = pd.DataFrame([{k: v for k, v in c.items() if k != "pool_bytes_per_rank"}
                         | {f"pool_{p}_bytes_per_rank": b for p, b in c["pool_bytes_per_rank"].items()}
                         for c in data["host_memory"]["candidates"]])  # fmt: skip
    frames = {"host_memory": host, "value_curve": pd.DataFrame(data["value"]["curve"]),
              "value_points": pd.json_normalize(data["value"]["points"]),
              "write_policy": pd.json_normalize(data["write_policy"]["rows"]),
              "l3": pd.json_normalize(data["l3"]["rows"])}  # fmt: skip
    if data["l3"].get("marginal"):
        frames["l3_marginal"] = pd.json_normalize(data["l3"]["marginal"])
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
    names += figures.save(data, folder)
    (folder / "report.md").write_text(_markdown(data, command))
    return names


def _markdown(d: dict, command: str) -> str:
    """The report, section by section: the recommendation first, since it is what the reader came for."""
    out = _md_header(d, command) + _md_recommendation(d) + _md_host_memory(d["host_memory"]) + _md_value(d["value"])
    out += _md_write_policy(d["write_policy"]) + _md_l3(d["l3"])
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
              "(`mem_cache/hicache_auto_size.py:63-72`).")
           + _largest_ratio_text(h), "",
           *_md_pinnable(h)]  # fmt: skip
    pools = [p["name"] for p in h["pools"]]
    rows = [[c["label"], f"{c['l2_pages']:,}", *[_fmt_gb(c["pool_bytes_per_rank"].get(p, 0)) for p in pools],
             _fmt_gb(c["bytes_per_rank"]), _fmt_gb(c["bytes_per_node"]), c["status"] + (f": {c['reason']}" if c["reason"] else "")]
            for c in h["candidates"]]  # fmt: skip
    return out + [_table(["candidate", "L2 Full pages", *[f"{p} GB/rank" for p in pools], "GB / rank", "GB / node",
                          "SGLang"], rows), ""]  # fmt: skip


def _md_pinnable(h: dict) -> list[str]:
    """Which pinnable ceiling applied, and where it came from (``sim/model/pinning.py``)."""
    if "pinnable_source" not in h:
        return []
    limit = "" if h["pinnable_gb"] is None else f"{gb_text(h['pinnable_gb'])} per node <- "
    return [f"Pinnable ceiling: {limit}{h['pinnable_source']} (`sim/model/pinning.py`).", ""]


def _md_value(v: dict) -> list[str]:
    out = ["## The value of host memory", "", "![value of host memory](value.png)", "",
           f"Left: hit rate against pinned host GB per node; the line is {v['curve_method']}"
           + (f" ({v['curve_reason']})" if v["curve_reason"] else "")
           + (f"; its largest gap to the replays is {100 * v['one_pass_max_gap']:.2f} points" if v["one_pass_max_gap"] is not None else "")
           + ". Replays serve the requests in order: a multi-turn workload in the order a timed run of the "
           "scenario first admitted them (the order the server's cache meets the rounds in), a trace in its own; "
           "they have no clock, so the timed runs can still differ. "
           "The clairvoyant ceiling is Belady's rule over L1 + L2 pages (no eviction policy does better; for "
           "DeepSeek-V4 it ignores the window, so it is a ceiling on Full-page hits). Dots: timed runs with their "
           "95% intervals. "
           + (f"The hit curve bends most at **{gb_text(v['knee_gb_per_node'])} per node** (the knee)."
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


_NO_CANDIDATE = ("No candidate host size starts (each is past the node's memory or the pinnable ceiling, see Host "
                 "memory), so none was run.")  # fmt: skip


def _md_write_policy(wp: dict) -> list[str]:
    if not wp["rows"]:
        return []
    if wp["candidate"] is None:
        return ["## Write policy", "", _NO_CANDIDATE, ""]
    out = ["## Write policy", "", "![write policy](write_policy.png)", "",
           f"At {wp['candidate']}. Dropped tokens by SGLang's reasons (`hicache_dropped_tokens_total`).", ""]
    rows = [[r["policy"], _iv(r, "hit_total", "{:.1%}"), _iv(r, "ttft_p90_s"), _iv(r, "input_tokens_per_s", "{:,.0f}"),
             _fmt_gb(r["d2h_bytes"] or 0), ", ".join(f"{k} {v:,.0f}" for k, v in r["dropped_tokens_by_reason"].items()) or "0"]
            for r in wp["rows"]]  # fmt: skip
    return out + [_table(["policy", "hit total", "TTFT p90 s", "input tok/s", "D2H GB", "dropped tokens"], rows), ""]


def _md_l3(l3: dict) -> list[str]:
    if not l3["rows"]:
        return []
    if l3["candidate"] is None:
        return ["## L3 storage", "", _NO_CANDIDATE, ""]
    out = ["## L3 storage", "", "![L3](l3.png)", "",
           f"L3 on, at the smallest host pool ({l3['candidate']}), where L2 evicts most. Prefetches: storage "
           "lookups that found a span past the L1 + L2 match at or above the threshold; cut: requested tokens "
           "that did not land (below the threshold, or past the timeout).", ""]  # fmt: skip
    rows = [[r["prefetch_policy"], str(r["prefetch_threshold"]), f"{r['prefetches'] or 0:,.1f}",
             f"{r['requested_tokens'] or 0:,.0f}", f"{r['cut_below_threshold'] or 0:,.0f}", f"{r['cut_deadline'] or 0:,.0f}",
             _iv(r, "hit_storage", "{:.1%}"), _iv(r, "ttft_p90_s")] for r in l3["rows"]]  # fmt: skip
    out += [_table(["policy", "threshold", "prefetches", "requested tokens", "cut: threshold", "cut: timeout",
                    "L3 hit", "TTFT p90 s"], rows), ""]  # fmt: skip
    return out + _md_l3_marginal(l3)


def _signed(x: dict) -> str:
    """A difference with its interval, not clipped at 0 (it may be a loss)."""
    return f"{x['mean']:+.1%}" + (f" [{x['lo']:+.1%}, {x['hi']:+.1%}]" if x["n"] > 1 else "")


def _largest_ratio_text(h: dict) -> str:
    """The largest ratio that fits; at the search's cap, that nothing up to the cap is refused (the cap is no
    result of the node's memory)."""
    ratio = h.get("largest_fitting_ratio")
    if ratio is None:
        return ""
    under = f", under {gb_text(h['pinnable_gb'])} pinnable per node" if h.get("pinnable_gb") else ""
    if ratio >= RATIO_SEARCH_CAP:
        return (f" Every `--hicache-ratio` up to {RATIO_SEARCH_CAP:,.0f}, where the search stops, passes that check "
                f"(per pool, per rank{under}): the node's memory does not bound the ratio here.")  # fmt: skip
    return f" The largest `--hicache-ratio` whose pools pass that check is {ratio:.3g} (per pool, per rank){under}."


def _md_l3_marginal(l3: dict) -> list[str]:
    if not l3.get("marginal"):
        return []
    out = ["### L3's marginal value", "",
           f"Each write policy at {l3['candidate']} with storage on and off (the scenario's prefetch policy and "
           "threshold). Every page a backup puts in the host pool is written on to storage once its copy is acked "
           "(SGLang's write-through ack, `mem_cache/unified_radix_cache.py:1803-1818`): *gained* is the total hit "
           "rate L3 adds, paired seed by seed, against the bytes it wrote. Where L2 already holds the working set, "
           "L3 writes without gaining.", ""]  # fmt: skip
    rows = [[r["write_policy"], _iv(r, "hit_total_off", "{:.1%}"), _iv(r, "hit_total_on", "{:.1%}"),
             _signed(r["gained"]), _iv(r, "l3_write_bytes", "{:,.2f}", 1 / GB),
             "-" if r["gained_points_per_tb"] is None else f"{r['gained_points_per_tb']:,.1f}"]
            for r in l3["marginal"]]  # fmt: skip
    return out + [_table(["write policy", "hit, L3 off", "hit, L3 on", "gained", "L3 written GB",
                          "hit points per TB written"], rows), ""]


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
    if z := hs.get("dsa_sizing"):
        out += [f"DSA sizing ({z['kv_dtype']} KV, {z['anchor_layers']} anchor + {z['skip_layers']} shared-index "
                f"layers): {z['capacity_gain']:.2f}x the KV tokens at host ratio {z['host_to_device_ratio']}, max "
                f"batch {z['max_batch_baseline']} off / {z['max_batch_hisparse']} on, "
                f"{z['host_pool_bytes_per_rank'] / 1e9:,.1f} GB pinned host pool per rank.", ""]  # fmt: skip
    rows = [[str(r["batch_cap"]), f"{r['on_output_tok_s'] or 0:,.0f}", f"{r['off_output_tok_s'] or 0:,.0f}",
             f"{r['on_peak_batch'] or 0}", f"{r['off_peak_batch'] or 0}",
             "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"] for r in hs["rows"]]  # fmt: skip
    return out + [_table(["batch cap", "on tok/s", "off tok/s", "on peak batch", "off peak batch", "on / off"], rows), ""]
