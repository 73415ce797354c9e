"""Request-order replay: a trace through :class:`sim.cache.hicache.HiCache` with no clock.

This is how hit rates are checked against published figures (SGLang's ``hicache_policy_simulator.py``
replays Mooncake traces the same way). Capacities may be given in pages or in bytes; bytes are turned
into pages through the model's pools.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sim.base.collector import cycle_gc_paused
from sim.base.errors import InputError
from sim.base.inputs import number_problem
from sim.base.text import plural
from sim.cache.clairvoyant import Bound, clairvoyant
from sim.cache.hicache import HiCache
from sim.cache.v4.hicache import request_keys
from sim.cache.v4.swacache import OutOfMemory, SWACache
from sim.model.pools import ModelSpec
from sim.serve.metrics import dropped_by_reason
from sim.workload.request import Request

__all__ = ["ReplayResult", "bound_capacities", "check_fits_v4", "duplicate_pages", "format_table", "pages_for_bytes", "parse_size",
           "replay", "replay_v4"]  # fmt: skip

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_size(text: str, option: str = "size") -> int:
    """``"60GiB"``, ``"1.5TB"``, ``"4096"`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise InputError(f"{option}: cannot read {text!r} as a size (e.g. 60GiB, 1.5TB, 4096)")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise InputError(f"{option}: must be > 0, got {text!r}")
    if (problem := number_problem(value)) is not None:
        raise InputError(f"{option}: {problem} (bytes)")
    return int(value)


def pages_for_bytes(model: ModelSpec, nbytes: int, page_tokens: int, swa_ratio: float = 0.1) -> int:
    """Tree pages of ``page_tokens`` tokens that ``nbytes`` hold, window pools sized at ``swa_ratio``."""
    return model.device_pages_for_bytes(nbytes * model.page_size / page_tokens, swa_ratio)


def duplicate_pages(cache: HiCache) -> int:
    """Pages held on device and host at once (settled or in flight), as SGLang's policy simulator counts
    them at the end of a replay."""
    return sum(len(n.key) for n in cache.tree.nodes() if n.device and n.host)


@dataclass
class ReplayResult:
    """One replay; ``bounds``: the clairvoyant bound at L1 and, with L2, at L1 + L2 pages (HiCache only).
    ``wall_s``: the replay's loop, reading the requests as it goes; ``read_s``: the seconds spent reading them
    (in the loop, and in any pass over the trace before it); ``replay_s``: the loop less its reads, the
    cache's own work, the figure to set beside another tree's."""

    cache: HiCache | SWACache
    trace: str
    wall_s: float
    model: ModelSpec | None = None  # for a V4 cache, which knows no bytes
    bounds: list[Bound] = field(default_factory=list)
    read_s: float = 0.0
    replay_s: float = 0.0

    def summary(self) -> dict:
        if isinstance(self.cache, SWACache):
            return _v4_summary(self)
        c, s = self.cache, self.cache.stats
        dup = duplicate_pages(c)
        host_pages = c.l2.kv_used
        return {
            "trace": self.trace,
            "model": c.model.name,
            "pools": len(c.model.pools),
            "page_tokens": c.page_tokens,
            "policy": c.policy.value,
            "eviction_policy": c.eviction_policy,
            "load_back_threshold": c.load_back_threshold,
            "l1_pages": _num(c.l1.kv_cap),
            "l2_pages": _num(c.l2.kv_cap) if c.l2_enabled else 0,
            "requests": s.requests,
            "input_tokens": s.input_tokens,
            "input_pages": s.input_pages,
            "l1_hit_tokens": s.hit_rate(("device",)),
            "l1l2_hit_tokens": s.hit_rate(("device", "host")),
            "l1_hit_pages": s.hit_rate(("device",), by="pages"),
            "l1l2_hit_pages": s.hit_rate(("device", "host"), by="pages"),
            "evictions": s.evictions,
            "demotions": s.demotions,
            "host_evictions": s.host_evictions,
            "dedup_evictions": s.dedup_evictions,
            "failed_host_allocations": s.host_alloc_failures,
            "duplicate_pages": dup,
            "duplicate_share_of_l2": dup / host_pages if host_pages else 0.0,
            "clairvoyant": [{"capacity_pages": b.capacity, "hit_tokens": b.hit_rate(), "hit_pages": b.hit_rate("pages"),
                             "wall_s": b.wall_s} for b in self.bounds],
            "metrics": c.metrics(),
            "kv_bytes_per_page": c.kv_bytes,
            "pool_names": [p.name for p in c.model.pools if p.bytes_per_page],
            "wall_s": self.wall_s,
            "read_s": self.read_s,
            "replay_s": self.replay_s,
        }  # fmt: skip


def replay_v4(cache: SWACache, model: ModelSpec, requests: Iterable[Request], trace: str = "",
              progress: bool = False, read_s: float = 0.0) -> ReplayResult:  # fmt: skip
    """Serve ``requests`` (sized: a list, or a surveyed trace stream) in order through the V4 cache: admission
    (with load-back), prefill chunk by chunk, decode, release; backups are acknowledged at the end of each request.
    Output pages that a trace does not give are keyed uniquely to their request. ``read_s``: seconds already
    spent reading the trace (a checking pass), added to the reads timed here."""
    from sim.base.progress import track

    reads = [read_s]
    start = time.perf_counter()
    with cycle_gc_paused():
        for req in _timed(track(requests, desc="replay", unit="requests", enabled=progress), reads):
            _serve_v4(cache, req, f"request {req.rid}", "the device pools even with everything else evicted", trace)
            cache.ack_all()
            cache.write_back_copies.clear()  # no clock: a write_back copy costs nothing here
    wall = time.perf_counter() - start
    return ReplayResult(cache, trace, wall, model, read_s=reads[0], replay_s=wall - (reads[0] - read_s))


def _timed(items: Iterable[Request], spent: list[float]) -> Iterator[Request]:
    """``items``, adding to ``spent[0]`` the seconds spent getting each (a streamed trace's reading)."""
    clock, it = time.perf_counter, iter(items)
    while True:
        start = clock()
        item = next(it, None)
        spent[0] += clock() - start
        if item is None:
            return
        yield item


def check_fits_v4(empty: SWACache, largest: Iterable[tuple[int, int]], trace: str = "") -> None:
    """Refuse, before a replay, a trace whose largest requests (:attr:`Survey.largest
    <sim.workload.stream.Survey.largest>`) the ``empty`` V4 pools cannot hold on their own: the replay would
    stop at the first of them."""
    for n_in, n_out in largest:
        probe = Request(0, 0.0, n_in, n_out, list(range(n_in // empty.page)))
        _serve_v4(empty, probe, "the trace's largest request", "the empty device pools", trace)


def _serve_v4(cache: SWACache, req: Request, what: str, pools: str, trace: str) -> None:
    """Admit ``req`` and run it to its end; pools too small for it (everything else evicted) are bad input,
    ``what`` the request and ``pools`` the pools the message names."""
    r = cache.admit(request_keys(req, cache.page), req.input_len, max(1, req.output_len))
    try:
        cache.finish(r)
    except OutOfMemory as exc:
        raise InputError(f"{what} ({req.input_len:,} + {req.output_len:,} tokens) does not fit {pools} ({exc}): give "
                         "L1 more pages", source=trace or None) from None  # fmt: skip


def _v4_summary(result: ReplayResult) -> dict:
    from sim.cache.v4.hicache import v4_metrics

    c, s, model = result.cache, result.cache.stats, result.model
    page = c.page
    inputs, pages = s["input_tokens"], s["input_pages"]
    hit = s["device_hit_tokens"] + s["host_hit_tokens"]
    cap = lambda x: None if x == float("inf") else int(x // page)  # noqa: E731
    return {
        "trace": result.trace,
        "model": model.name,
        "pools": len(model.pools),
        "page_tokens": page,
        "policy": c.write_policy,
        "load_back_threshold": c.load_back_threshold,
        "l1_pages": cap(c.full_cap),
        "l2_pages": cap(c.host_full_cap) if c.hicache else 0,
        "requests": s["requests"],
        "input_tokens": inputs,
        "input_pages": pages,
        "l1_hit_tokens": s["device_hit_tokens"] / inputs if inputs else 0.0,
        "l1l2_hit_tokens": hit / inputs if inputs else 0.0,
        "l1_hit_pages": s["device_hit_tokens"] // page / pages if pages else 0.0,
        "l1l2_hit_pages": hit // page / pages if pages else 0.0,
        "evictions": s["evicted_leaves"],
        "demotions": s["demotions"],
        "host_evictions": s["host_evictions"],
        "metrics": v4_metrics(c, model),
        "kv_bytes_per_page": sum(p.bytes_per_page for p in model.pools if p.anchor == "kv") * page // model.page_size,
        "pool_names": [p.name for p in model.pools if p.bytes_per_page],
        "wall_s": result.wall_s,
        "read_s": result.read_s,
        "replay_s": result.replay_s,
    }


def _num(x: float) -> int | None:
    return None if x == float("inf") else int(x)


def replay(cache: HiCache, requests: Iterable[Request], trace: str = "", progress: bool = False,
           bound: bool = False, read_s: float = 0.0) -> ReplayResult:  # fmt: skip
    """Serve ``requests`` (sized: a list, or a surveyed trace stream) in order. Window state and backups settle at
    the end of each request.

    ``bound``: also run the clairvoyant bound (:mod:`sim.cache.clairvoyant`) at the cache's capacities (a second
    pass over ``requests``). ``read_s``: as :func:`replay_v4`'s.
    """
    from sim.base.progress import track

    reads = [read_s]
    start = time.perf_counter()
    serve = cache.serve
    with cycle_gc_paused():
        for req in _timed(track(requests, desc="replay", unit="requests", enabled=progress), reads):
            serve(req.keys, req.input_len)
    wall = time.perf_counter() - start
    bounds = clairvoyant(requests, bound_capacities(cache), cache.page_tokens) if bound else []
    return ReplayResult(cache, trace, wall, bounds=bounds, read_s=reads[0], replay_s=wall - (reads[0] - read_s))


def bound_capacities(cache: HiCache) -> list[int | None]:
    """The capacities the clairvoyant bound is worth running at: L1, and L1 + L2 when L2 is on."""
    l1 = _num(cache.l1.kv_cap)
    if not cache.l2_enabled:
        return [l1]
    l2 = _num(cache.l2.kv_cap)
    return [l1, None if l1 is None or l2 is None else l1 + l2]


def format_table(result: ReplayResult) -> str:
    """The human summary that ``hicache-sim replay`` prints."""
    d = result.summary()
    m = d["metrics"]
    cap = lambda p: "unbounded" if p is None else f"{p:,} pages ({p * d['kv_bytes_per_page'] / 1e9:,.1f} GB kv-anchored)"  # noqa: E731
    lines = [
        f"{Path(d['trace']).name}: {d['model']} ({plural(d['pools'], 'pool')}), {d['page_tokens']}-token pages, "
        f"{d['policy']}, {d.get('eviction_policy', 'lru')} eviction, load-back threshold {d['load_back_threshold']}",
        f"L1 {cap(d['l1_pages'])}; L2 {'off' if not d['l2_pages'] and d['l2_pages'] is not None else cap(d['l2_pages'])}",
        "",
        f"{'requests':<26}{d['requests']:>16,}",
        f"{'input tokens':<26}{d['input_tokens']:>16,}",
        f"{'input pages (whole)':<26}{d['input_pages']:>16,}",
        f"{'':<26}{'by tokens':>16}{'by pages':>12}",
        f"{'L1 hit':<26}{d['l1_hit_tokens']:>15.2%}{d['l1_hit_pages']:>12.2%}",
        f"{'L1+L2 hit':<26}{d['l1l2_hit_tokens']:>15.2%}{d['l1l2_hit_pages']:>12.2%}",
        f"{'evictions (L1 leaves)':<26}{d['evictions']:>16,}",
        f"{'demotions (L1 -> L2)':<26}{d['demotions']:>16,}",
        f"{'host evictions (L2)':<26}{d['host_evictions']:>16,}",
    ]
    if "duplicate_pages" in d:  # the single-pool residency model's boundary counters
        lines += [
            f"{'  of which dedup (D+H->D)':<26}{d['dedup_evictions']:>16,}",
            f"{'failed host allocations':<26}{d['failed_host_allocations']:>16,}",
            f"{'duplicate pages (D+H)':<26}{d['duplicate_pages']:>16,}  {d['duplicate_share_of_l2']:.1%} of L2 in use",
        ]
    dropped = dropped_by_reason(m)
    lines.append(f"{'dropped tokens':<26}{sum(dropped.values()):>16,}"
                 + "".join(f"  {k}={v:,}" for k, v in sorted(dropped.items())))  # fmt: skip
    lines += ["", f"{'bytes moved per pool':<26}{'D2H (backup)':>16}{'H2D (load-back)':>18}"]
    backup, load = m["sim_hicache_backup_bytes_by_pool"], m["sim_load_back_bytes_by_pool"]
    for name in d["pool_names"]:
        lines.append(f"  {name:<24}{_gb(backup.get(name, 0)):>16}{_gb(load.get(name, 0)):>18}")
    lines.append(f"  {'total':<24}{_gb(m['hicache_backup_bytes_total']):>16}{_gb(m['load_back_bytes_total']):>18}")
    if result.bounds:
        lines += ["", "clairvoyant bound (Belady: knows the trace's future; no server can implement it)",
                  f"{'':<26}{'by tokens':>16}{'by pages':>12}{'this policy':>14}"]
        for b, label, key in zip(result.bounds, ("  L1", "  L1+L2"), ("l1_hit", "l1l2_hit")):
            mine = d[f"{key}_tokens"]
            share = f"{mine / b.hit_rate():.0%} of it" if b.hit_rate() else "-"
            lines.append(f"{label + ' at ' + _cap_pages(b.capacity) + ' pages':<26}{b.hit_rate():>15.2%}{b.hit_rate('pages'):>12.2%}"
                         f"{share:>14}")
    rate = d["requests"] / d["wall_s"] if d["wall_s"] else 0.0
    lines += ["", f"replayed in {d['wall_s']:.2f} s ({rate:,.0f} requests/s)",
              f"reading the trace {d['read_s']:.2f} s (checking every record, then as replayed), replaying {d['replay_s']:.2f} s"]
    return "\n".join(lines)


def _cap_pages(capacity: int | None) -> str:
    return "unbounded" if capacity is None else f"{capacity:,}"


def _gb(n: int) -> str:
    return f"{n / 1e9:,.2f} GB"
