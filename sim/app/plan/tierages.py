"""The plan's tier-sizing section: which tier is too small for which reuse window, at each host size it timed.

Read from the timed runs the value section already makes (L1 only and each startable host candidate, every
seed): their page-age histograms (:mod:`sim.cache.ages`) are summed over the seeds, then read as a run's are
(:func:`sim.cache.ages.verdicts`). No run of its own.
"""

from __future__ import annotations

from typing import Any

from sim.cache.ages import TierAges, verdicts

__all__ = ["headline", "markdown", "merged", "section"]


def merged(rows: list[dict | None]) -> TierAges | None:
    """The seeds' age histograms summed (None when no run recorded any)."""
    out: TierAges | None = None
    for r in rows:
        if r is None or "ages" not in r:
            continue
        ages = TierAges.from_metrics(r["ages"])
        if out is None:
            out = ages
        else:
            out.merge(ages)
    return out


def section(seeds: list[int], labels: list[str], get: Any) -> dict[str, Any]:
    """Per timed host size (``labels``, ``get(("timed", label, seed))``): the ages per tier and the verdict."""
    rows = []
    for label in labels:
        ages = merged([get(("timed", label, s)) for s in seeds])
        if ages is not None:
            rows.append({"label": label, "tiers": ages.tiers(), "verdict": verdicts(ages)})
    return {"rows": rows}


def headline(sec: dict[str, Any], choice: str | None) -> list[str]:
    """What ``plan`` prints: the verdict at the recommended host size, else at the largest one timed."""
    rows = sec.get("rows", [])
    row = next((r for r in rows if r["label"] == choice), rows[-1] if rows else None)
    if row is None:
        return []
    return [f"tier sizing at {row['label']}: {row['verdict'][0]}", *(f"  {v}" for v in row["verdict"][1:])]


def _age(row: dict, tier: str, key: str) -> str:
    v = row["tiers"].get(tier, {}).get(key)
    return "-" if v is None else f"{v:.2g}"


def markdown(sec: dict[str, Any]) -> dict[str, Any] | None:
    """The section in the report, a table of median ages per tier and the verdict per host size: its lead-in,
    column heads and rows (the report lays it out)."""
    if not sec["rows"]:
        return None
    intro = ["## Which tier is too small", "",
             "Median page age (seconds since a page's last use by a request, or its insert) when a tier serves it "
             "(hit) and when it lets it go (evict), over the seeds of each timed run above; a tier whose evictions "
             "are younger than the reuse the tiers below it serve lets pages go before they come back. Metric "
             "names as proposed upstream (sgl-project/sglang#38559: `kv_age_seconds`, `kv_reuses`); "
             "`hicache-sim plot ages RUN` draws the distributions.", ""]  # fmt: skip
    heads = ["host size", "L1 hit", "L1 evict", "L2 hit", "L2 evict", "L3 hit", "verdict"]
    rows = [[r["label"], _age(r, "device", "age_at_hit_p50_s"), _age(r, "device", "age_at_evict_p50_s"),
             _age(r, "host", "age_at_hit_p50_s"), _age(r, "host", "age_at_evict_p50_s"),
             _age(r, "storage", "age_at_hit_p50_s"), "; ".join(r["verdict"])] for r in sec["rows"]]  # fmt: skip
    return {"intro": intro, "heads": heads, "rows": rows}
