"""One trace under several policies and capacities: the table (and plot) of ``hicache-sim compare``.

A policy is ``WRITE[+EVICTION]`` (``boundary``, ``write_through+lfu``, ``slru``: the part left out is
write_through / lru), or ``clairvoyant``: the bound of :mod:`sim.cache.clairvoyant`, which no server can
implement. L2 capacities may be pages or multiples of L1 (``0.5x``), as ``boundary_policy.md`` states them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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


Point = tuple[Policy, int, int, "str | None"]  # policy, L1 pages, L2 pages, L2 as typed ("0.5x") or None
Setup = tuple[list[Request], ModelSpec, int, int]  # requests, model, page tokens, load-back threshold
Mapper = Callable[[list[tuple[Callable[..., Any], tuple]]], list[Any]]


def compare(requests: list[Request], model: ModelSpec, policies: Sequence[Policy], l1_pages: Sequence[int],
            l2: Sequence[tuple[str, float]], *, page_tokens: int, load_back_threshold: int = 10,
            progress: bool = False, workers: int = 1, mapper: Mapper | None = None) -> pd.DataFrame:  # fmt: skip
    """One row per (policy, L1, L2): hit rates by pages and tokens, duplicates, failed host allocations.

    The points are independent. With ``workers`` > 1 they are dealt into that many calls (a policy's clairvoyant
    points stay in one, so the trace's future is indexed once; the others round-robin, which mixes small and
    large capacities in each) that ``mapper`` runs, returning their results in order: the CLI's runs them in
    worker processes, each of which receives the requests once. By default the calls run here, in turn."""
    from sim.base.progress import track

    points: list[Point] = [(p, a, int(v * a) if kind == "x" else int(v), f"{v:g}x" if kind == "x" else None)
                           for a in l1_pages for kind, v in l2 for p in policies]  # fmt: skip
    plain = [i for i, point in enumerate(points) if not point[0].clairvoyant]
    groups = [plain[k::workers] for k in range(min(workers, len(plain)))] if workers > 1 else [[i] for i in plain]
    for policy in {p.label for p, *_ in points if p.clairvoyant}:
        groups.append([i for i, point in enumerate(points) if point[0].label == policy])
    setup: Setup = (requests, model, page_tokens, load_back_threshold)
    calls = [(_rows, ([points[i] for i in group], setup)) for group in groups]
    if mapper is None:
        results = [fn(*args) for fn, args in track(calls, desc="compare", unit="runs", enabled=progress)]
    else:
        results = mapper(calls)
    rows: list[dict] = [{}] * len(points)
    for group, group_rows in zip(groups, results):
        for i, row in zip(group, group_rows):
            rows[i] = row
    return pd.DataFrame(rows)


def _rows(points: list[Point], setup: Setup) -> list[dict]:
    """The rows of some points, replayed in this process (a worker's unit of work)."""
    requests, model, page_tokens, load_back_threshold = setup
    trace = PageTrace(requests, page_tokens) if any(p.clairvoyant for p, *_ in points) else None
    rows = []
    for policy, l1, l2_pages, l2_label in points:
        row = {"policy": policy.label, "l1_pages": l1, "l2_pages": l2_pages, "l2": l2_label or str(l2_pages)}
        if trace is not None and policy.clairvoyant:
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
    return rows


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
