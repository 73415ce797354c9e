"""L3's marginal value, per write policy: the hits storage adds against the bytes it makes the server write.

SGLang's HiCache with storage writes every page that enters the host pool to storage: once a host backup's D2H
copy is acknowledged, each node it published goes to ``write_backup_storage`` (``mem_cache/unified_radix_cache.py
:1803-1818``, ``:1990-2027``), which queues a storage write (``managers/cache_controller.py:1386-1399``) that the
backup thread runs (``backup_thread_func``, ``:1446-1462``; ``_page_backup``, ``:1416-1437``). So what storage costs in writes follows the write policy: write_through
backs up (and so writes) on insert, write_through_selective only pages hit often enough, write_back only at
device eviction. The simulator does the same (:mod:`sim.serve.scheduler.cache_controller`).

Per write policy, at the L3 section's host size (the smallest startable, where L2 evicts most), one timed run
with L3 off and one with L3 on per seed; the hit gain is the paired difference per seed, with its 95% interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.app.plan import tasks
from sim.app.scenario import Scenario
from sim.app.seeds import interval

__all__ = ["add_jobs", "markdown", "section"]

GB = 1e9


def add_jobs(jobs: Any, spec: Any, scenario: Callable[[str, bool], Scenario] | None) -> list[str]:
    """Add the L3 off/on pairs per write policy and seed; ``scenario(policy, l3_on)`` builds one at the L3
    section's host size (None: no host size starts, nothing to add). Returns the policies."""
    if scenario is None:
        return []
    for pol in spec.policies:
        for on in (False, True):
            sc = scenario(pol, on)
            for seed in spec.seeds:
                jobs.add(("l3value", pol, on, seed), tasks.timed_run, sc.model_copy(update={"seed": seed}))
    return list(spec.policies)


def _mean(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return sum(vals) / len(vals) if vals else None


def section(seeds: list[int], policies: list[str], get: Any) -> dict[str, Any]:
    """Per write policy: hit rate without and with L3, the paired gain (interval over seeds), the tokens it
    adds, and what storage was written (bytes and tokens) for them."""
    rows = []
    for pol in policies:
        pairs = [(get(("l3value", pol, False, s)), get(("l3value", pol, True, s))) for s in seeds]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        if not pairs:
            rows.append({"policy": pol, "seeds_ok": 0})
            continue
        offs, ons = [a for a, _ in pairs], [b for _, b in pairs]
        gain = interval([b["hit_total"] - a["hit_total"] for a, b in pairs])
        tokens = [(b["hit_total"] - a["hit_total"]) * b["input_tokens"] for a, b in pairs]
        written = _mean(ons, "link_bytes_l3_write") or 0.0
        gained = sum(tokens) / len(tokens)
        rows.append({"policy": pol, "seeds_ok": len(pairs), "hit_total_off": _mean(offs, "hit_total"),
                     "hit_total_on": _mean(ons, "hit_total"), "hit_storage_on": _mean(ons, "hit_storage"),
                     "hit_gain": {"mean": gain.mean, "lo": gain.lo, "hi": gain.hi, "n": gain.n},
                     "hit_tokens_gained": gained, "storage_bytes_written": written,
                     "storage_tokens_written": _mean(ons, "storage_written_tokens"),
                     "hit_tokens_per_gb_written": gained / (written / GB) if written else None,
                     "ttft_p90_s_off": _mean(offs, "ttft_p90_s"), "ttft_p90_s_on": _mean(ons, "ttft_p90_s")})  # fmt: skip
    return {"rows": rows}


def markdown(sec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The L3 section's marginal-value table: its lead-in, column heads and rows (the report lays it out)."""
    if not sec or not sec["rows"]:
        return None
    intro = ["### L3's marginal value, per write policy", "",
             "SGLang writes every page that enters the host pool to storage once its host backup lands "
             "(`unified_radix_cache.py:1803-1818`), so storage's write traffic follows the write policy. Hit gain: "
             "the total hit rate with L3 on minus with L3 off, paired per seed (95% interval, not clipped: L3 can "
             "cost hits, as its reads hold admissions); it includes what L3 changes in L1 and L2 hits, beside its "
             "own (L3 hit). Tokens gained per GB: the hit tokens L3 adds for each GB the server writes to it.",
             ""]  # fmt: skip
    rows = []
    for r in sec["rows"]:
        if not r["seeds_ok"]:
            rows.append([r["policy"]] + ["-"] * 8)
            continue
        g, per_gb = r["hit_gain"], r["hit_tokens_per_gb_written"]
        gain = f"{g['mean']:+.1%}" + (f" [{g['lo']:+.1%}, {g['hi']:+.1%}]" if g["n"] > 1 else "")
        rows.append([r["policy"], _pct(r["hit_total_off"]), _pct(r["hit_total_on"]), _pct(r["hit_storage_on"]), gain,
                     f"{r['hit_tokens_gained']:,.0f}", f"{r['storage_bytes_written'] / GB:,.2f}",
                     "-" if per_gb is None else f"{per_gb:,.0f}",
                     f"{r['ttft_p90_s_off']:.3f} / {r['ttft_p90_s_on']:.3f}"])  # fmt: skip
    heads = ["write policy", "hit, L3 off", "hit, L3 on", "L3 hit", "hit gain", "hit tokens gained",
             "GB written to L3", "tokens gained per GB", "TTFT p90 s off / on"]  # fmt: skip
    return {"intro": intro, "heads": heads, "rows": rows}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"
