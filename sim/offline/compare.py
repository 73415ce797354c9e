"""One trace under several policies and capacities: the table (and plot) of ``hicache-sim compare``.

A policy is ``WRITE[+EVICTION]`` (``boundary``, ``write_through+lfu``, ``slru``: the part left out is
write_through / lru), or ``clairvoyant``: the bound of :mod:`sim.cache.clairvoyant`, which no server can
implement. L2 capacities may be pages or multiples of L1 (``0.5x``), as ``boundary_policy.md`` states them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from sim.base.errors import InputError
from sim.cache.clairvoyant import PageTrace
from sim.cache.eviction import EVICTION_POLICIES
from sim.cache.hicache import HiCache, WritePolicy
from sim.model.pools import ModelSpec
from sim.offline.replay import replay
from sim.workload.request import Request

__all__ = ["CLAIRVOYANT", "Policy", "compare", "format_compare", "parse_l2", "parse_policies"]

CLAIRVOYANT = "clairvoyant"
WRITE_POLICIES = tuple(p.value for p in WritePolicy)


@dataclass(frozen=True)
class Policy:
    label: str
    write: str = "write_through"
    eviction: str = "lru"

    @property
    def clairvoyant(self) -> bool:
        return self.label == CLAIRVOYANT


def parse_policies(text: str) -> list[Policy]:
    """``"write_through,boundary,boundary+lfu,clairvoyant"`` -> policies, in order."""
    out: list[Policy] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item == CLAIRVOYANT:
            out.append(Policy(CLAIRVOYANT))
            continue
        write, eviction = "write_through", "lru"
        for part in item.split("+"):
            if part in WRITE_POLICIES:
                write = part
            elif part in EVICTION_POLICIES:
                eviction = part
            else:
                raise InputError(f"--policies: unknown policy {part!r} in {item!r} (write: {', '.join(WRITE_POLICIES)}; "
                                 f"eviction: {', '.join(EVICTION_POLICIES)}; or {CLAIRVOYANT})")  # fmt: skip
        out.append(Policy(item, write, eviction))
    if not out:
        raise InputError("--policies: no policy given")
    return out


def parse_l2(text: str) -> list[tuple[str, float]]:
    """``"0,0.5x,12000"`` -> [("pages", 0), ("x", 0.5), ("pages", 12000)]."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        m = re.fullmatch(r"([0-9]*\.?[0-9]+)(x?)", item)
        if not m:
            raise InputError(f"--l2-pages: cannot read {item!r} (pages, or a multiple of L1 such as 0.5x)")
        value = float(m.group(1))
        if not m.group(2) and value != int(value):
            raise InputError(f"--l2-pages: {item!r} is not a whole number of pages")
        out.append(("x" if m.group(2) else "pages", value))
    return out


def compare(requests: list[Request], model: ModelSpec, policies: Sequence[Policy], l1_pages: Sequence[int],
            l2: Sequence[tuple[str, float]], *, page_tokens: int, load_back_threshold: int = 10,
            progress: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per (policy, L1, L2): hit rates by pages and tokens, duplicates, failed host allocations."""
    from sim.base.progress import track

    points = [(p, a, int(v * a) if kind == "x" else int(v), f"{v:g}x" if kind == "x" else None)
              for a in l1_pages for kind, v in l2 for p in policies]  # fmt: skip
    trace = PageTrace(requests, page_tokens) if any(p.clairvoyant for p in policies) else None
    rows = []
    for policy, l1, l2_pages, l2_label in track(points, desc="compare", unit="runs", enabled=progress):
        row = {"policy": policy.label, "l1_pages": l1, "l2_pages": l2_pages, "l2": l2_label or str(l2_pages)}
        if policy.clairvoyant:
            b1 = trace.bound(l1)
            b12 = trace.bound(l1 + l2_pages) if l2_pages else b1
            row.update(l1_hit_pages=b1.hit_rate("pages"), l1l2_hit_pages=b12.hit_rate("pages"),
                       l1_hit_tokens=b1.hit_rate(), l1l2_hit_tokens=b12.hit_rate(),
                       wall_s=b1.wall_s + (b12.wall_s if l2_pages else 0.0))  # fmt: skip
        else:
            cache = HiCache(model, l1_pages=l1, l2_pages=l2_pages, policy=policy.write, page_tokens=page_tokens,
                            load_back_threshold=load_back_threshold, eviction_policy=policy.eviction)  # fmt: skip
            s = replay(cache, requests).summary()
            row.update({k: s[k] for k in ("l1_hit_pages", "l1l2_hit_pages", "l1_hit_tokens", "l1l2_hit_tokens",
                                          "demotions", "dedup_evictions", "failed_host_allocations",
                                          "duplicate_pages", "wall_s")})  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def format_compare(df: pd.DataFrame) -> str:
    """The table ``hicache-sim compare`` prints: hit rates by whole input pages, as SGLang's simulator."""
    head = (f"{'policy':<24}{'L1 pages':>9}{'L2 pages':>10}{'L1 hit':>9}{'L1+L2 hit':>11}{'dup pages':>11}"
            f"{'failed H':>10}{'dedup':>9}{'demotions':>11}{'seconds':>9}")  # fmt: skip
    lines = [head, "-" * len(head)]

    def num(row, key: str) -> str:
        value = row.get(key)
        return "-" if value is None or pd.isna(value) else f"{int(value):,}"

    for row in df.to_dict("records"):
        lines.append(f"{row['policy']:<24}{row['l1_pages']:>9,}{row['l2_pages']:>10,}{row['l1_hit_pages']:>9.2%}"
                     f"{row['l1l2_hit_pages']:>11.2%}{num(row, 'duplicate_pages'):>11}"
                     f"{num(row, 'failed_host_allocations'):>10}{num(row, 'dedup_evictions'):>9}"
                     f"{num(row, 'demotions'):>11}{row['wall_s']:>9.2f}")  # fmt: skip
    if (df["policy"] == CLAIRVOYANT).any():
        lines.append(f"{CLAIRVOYANT}: Belady's rule, knows the trace's future; a bound no server can implement.")
    return "\n".join(lines)
