"""How old a page is when a tier serves it and when a tier lets it go: the thrash diagnosis per tier.

Proposed upstream as metrics in sgl-project/sglang#38559 (open, 2026-09): ``sglang:kv_age_seconds`` with labels
``event`` (``hit``, ``evict``) and ``tier`` (``device``, ``host``), its token-weighted companion
``sglang:kv_age_tokens_total{event, tier, age_le}``, and ``sglang:kv_reuses{tier}`` (a node's ``hit_count`` at
eviction). The PR covers L1 and L2; the ``storage`` tier here (L3) is this simulator's extension under the same
names. Its age buckets start at 1 s, too coarse for runs that simulate seconds: these use :data:`EDGES`.

The age is the simulated time since a node's last *use*: its creation (an insert) or its last hit by an admitted
request. SGLang's ``last_access_time`` is also refreshed by the scheduler's probing matches of waiting requests
(``schedule_policy.py:346-395``), which would make every waiting request's hit look one pass old; the tree's
logical LRU clock (:mod:`sim.cache.v4.unified`) cannot be turned into seconds either. So the caches stamp a
node's ``used`` time, read from :attr:`TierAges.clock`, only when a node is created and when an admission hits
it (a node an L3 read brought in counts its hit at L3, :func:`landed`). Recording costs one histogram add per evicted node and per hit node: fixed bins, no per-event lists.

The verdict follows the reading the PR gives: a tier whose evictions are younger than the reuse the tiers below
it serve lets pages go before they come back (``L1 is too small for the reuse window``).
"""

from __future__ import annotations

import bisect
import math
from typing import Any, Protocol

from sim.base.text import seconds_text

__all__ = ["DEVICE", "EDGES", "HOST", "STORAGE", "TIERS", "TierAges", "landed", "median", "quantile", "verdicts"]

DEVICE, HOST, STORAGE = "device", "host", "storage"
TIERS = (DEVICE, HOST, STORAGE)
TIER_NAMES = {DEVICE: "L1", HOST: "L2", STORAGE: "L3"}
# Upper bucket edges in seconds, eight per decade from 1 ms to 1e5 s (about a day); the last bucket is +Inf.
PER_DECADE = 8
EDGES: tuple[float, ...] = tuple(float(f"{10 ** (k / PER_DECADE):.4g}") for k in range(-3 * PER_DECADE, 5 * PER_DECADE + 1))
REUSE_CAP = 16  # reuse counts at eviction of 16 and more share a bucket


class Clock(Protocol):
    @property
    def now(self) -> float: ...


class _Never:
    now = 0.0


def landed(now: float) -> float:
    """The ``used`` stamp of a node an L3 read brought to L2 at ``now``: its hit was L3's (recorded at the
    read), so the admission that takes it from L2 records none; its age still runs from ``now``."""
    return -1.0 - now


def _since(used: float) -> float:
    return used if used >= 0 else -1.0 - used


def _bucket(age: float) -> int:
    return bisect.bisect_left(EDGES, age)


class TierAges:
    """Token-weighted histograms of page age at hit and at eviction, and of reuse counts at eviction, per tier.

    ``clock``: anything with a ``now`` in simulated seconds (the SimPy environment); the caches read it."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else _Never()
        self.window_pools = False  # a model with window pools: their evictions are not counted (pages are Full's)
        nb = len(EDGES) + 1
        self.hit: dict[str, list[int]] = {t: [0] * nb for t in TIERS}
        self.evict: dict[str, list[int]] = {t: [0] * nb for t in TIERS}
        self.reuses: dict[str, list[int]] = {t: [0] * (REUSE_CAP + 1) for t in TIERS}
        self.age_sum: dict[str, dict[str, float]] = {"hit": dict.fromkeys(TIERS, 0.0),
                                                     "evict": dict.fromkeys(TIERS, 0.0)}  # fmt: skip

    def hit_at(self, tier: str, used: float, tokens: int, now: float) -> None:
        """A hit of ``tokens`` last used at ``used``, served by ``tier`` at ``now``; none for a node an L3 read
        brought in (:func:`landed`: the read recorded it)."""
        if used < 0:
            return
        age = now - used
        self.hit[tier][_bucket(age)] += tokens
        self.age_sum["hit"][tier] += age * tokens

    def evicted(self, tier: str, used: float, tokens: int, reuses: int | None) -> None:
        """``tokens`` last used at ``used`` leave ``tier`` now, after ``reuses`` hits (None: not counted)."""
        age = self.clock.now - _since(used)
        self.evict[tier][_bucket(age)] += tokens
        self.age_sum["evict"][tier] += age * tokens
        if reuses is not None:
            self.reuses[tier][min(reuses, REUSE_CAP)] += tokens

    def merge(self, other: TierAges) -> None:
        for mine, theirs in ((self.hit, other.hit), (self.evict, other.evict), (self.reuses, other.reuses)):
            for t in TIERS:
                mine[t] = [a + b for a, b in zip(mine[t], theirs[t])]
        for ev in self.age_sum:
            for t in TIERS:
                self.age_sum[ev][t] += other.age_sum[ev][t]

    # ----- reading -------------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """Under the PR's names: ``kv_age_tokens_total`` by event, tier and bucket upper edge (``age_le``, only
        the buckets that counted), ``kv_age_seconds`` as its count/sum, ``kv_reuses`` tokens by reuse count."""
        labels = [f"{e:g}" for e in EDGES] + ["+Inf"]
        tokens: dict[str, dict] = {}
        seconds: dict[str, dict] = {}
        for ev, hist in (("hit", self.hit), ("evict", self.evict)):
            tokens[ev] = {t: {labels[i]: n for i, n in enumerate(hist[t]) if n} for t in TIERS if any(hist[t])}
            seconds[ev] = {t: {"count": sum(hist[t]), "sum": self.age_sum[ev][t]} for t in tokens[ev]}
        reuse_labels = [str(i) for i in range(REUSE_CAP)] + [f"{REUSE_CAP}+"]
        reuses = {t: {reuse_labels[i]: n for i, n in enumerate(h) if n} for t, h in self.reuses.items() if any(h)}
        return {"kv_age_seconds": seconds, "kv_age_tokens_total": tokens, "kv_reuses": reuses}

    @classmethod
    def from_metrics(cls, m: dict[str, Any]) -> TierAges:
        """The histograms back from :meth:`metrics`' output (a run's ``summary.json``)."""
        ages = cls()
        index = {f"{e:g}": i for i, e in enumerate(EDGES)} | {"+Inf": len(EDGES)}
        for ev, hist in (("hit", ages.hit), ("evict", ages.evict)):
            for t, bins in m.get("kv_age_tokens_total", {}).get(ev, {}).items():
                for le, n in bins.items():
                    hist[t][index[le]] = n
                ages.age_sum[ev][t] = m["kv_age_seconds"][ev][t]["sum"]
        for t, counts in m.get("kv_reuses", {}).items():
            for k, n in counts.items():
                ages.reuses[t][int(k.rstrip("+"))] = n
        return ages

    def tiers(self) -> dict[str, dict[str, Any]]:
        """Per tier with any traffic: tokens hit and evicted, their median and p90 ages (seconds, see
        :func:`quantile`), and the share of evicted tokens never hit again after their insert (reuse count at most 1:
        SGLang's insert counts one, ``unified_tree_core.py:1104-1123``)."""
        out: dict[str, dict[str, Any]] = {}
        for t in TIERS:
            hit, ev = sum(self.hit[t]), sum(self.evict[t])
            if not hit and not ev:
                continue
            row: dict[str, Any] = {"hit_tokens": hit, "evicted_tokens": ev}
            for name, hist in (("hit", self.hit[t]), ("evict", self.evict[t])):
                row[f"age_at_{name}_p50_s"] = median(hist)
                row[f"age_at_{name}_p90_s"] = quantile(hist, 0.9)
            counted = sum(self.reuses[t])
            row["evicted_never_reused"] = (self.reuses[t][0] + self.reuses[t][1]) / counted if counted else None
            out[t] = row
        return out


def quantile(hist: list[int], q: float) -> float | None:
    """The ``q`` quantile, log-interpolated within the bucket that holds it (None when empty; inf when it
    falls in the last, unbounded bucket)."""
    total = sum(hist)
    if not total:
        return None
    want, run = q * total, 0
    for i, n in enumerate(hist):
        if n and run + n >= want:
            if i == len(EDGES):
                return math.inf
            lo = EDGES[i - 1] if i else EDGES[0] / 10 ** (1 / PER_DECADE)
            return lo * (EDGES[i] / lo) ** ((want - run) / n)
        run += n
    return math.inf


def median(hist: list[int]) -> float | None:
    return quantile(hist, 0.5)


def _merged(ages: TierAges, tiers: list[str]) -> list[int]:
    return [sum(col) for col in zip(*(ages.hit[t] for t in tiers))]


def verdicts(ages: TierAges, *, min_share: float = 0.01) -> list[str]:
    """Which tier is too small for which reuse window, one line per tier that evicts: its median age at
    eviction against the median age at which the tiers below it serve hits (the reuse it could have kept); the
    last tier that evicts is held to the p90 age of every hit (the session's reuse window). A tier that evicts
    less than ``min_share`` of the tokens hit is not judged."""
    total_hits = sum(sum(h) for h in ages.hit.values())
    evicting = [t for t in TIERS if sum(ages.evict[t])]
    lines: list[str] = []
    if not evicting:
        return ["no tier evicted: each holds its reuse window"]
    for i, t in enumerate(TIERS):
        ev = sum(ages.evict[t])
        if not ev:
            continue
        name, at_evict = TIER_NAMES[t], median(ages.evict[t])
        if total_hits and ev < min_share * total_hits:
            lines.append(f"{name} evicts little ({ev:,} tokens): not judged")
            continue
        below = [b for b in TIERS[i + 1:] if sum(ages.hit[b])]
        if below:
            reuse, what = median(_merged(ages, below)), "the reuse window"
            where = f"median age at hit in {'+'.join(TIER_NAMES[b] for b in below)}"
        else:
            reuse, what = quantile(_merged(ages, list(TIERS)), 0.9), "the session"
            where = "p90 age at hit, all tiers"
        assert at_evict is not None
        if reuse is None:
            lines.append(f"{name} evicts at median age {_s(at_evict)}; no hits to hold it to")
        elif at_evict < reuse:
            lines.append(f"{name} is too small for {what}: median age at eviction {_s(at_evict)} < {where} "
                         f"{_s(reuse)}")
        else:
            lines.append(f"{name} holds {what}: median age at eviction {_s(at_evict)} >= {where} {_s(reuse)}")
    return lines


def _s(seconds: float) -> str:
    return "over 1e5 s" if math.isinf(seconds) else seconds_text(seconds)
