"""Cost tables: the one versioned JSON format that ``calibrate/`` writes and the engine reads for copy times.

A table holds timed **entries** (op, backend, shape -> median/p10/p90 seconds), the link **ceilings**, and per
(op, backend) **fits** ``t = latency_s + n_items * per_item_s + bytes / bandwidth_Bps``. Its ``source`` says
whether it was measured (device, driver, CUDA, torch, triton, PCIe, copy engines, date) or is ``spec-derived``
(built by ``calibrate/spec.py`` from published figures; the bundled default). An optional **compute** section
holds the step-time efficiencies that ``hicache-sim calibrate compute`` fitted to measured runs (``mfu``, ``mbu``,
``step_overhead_ms``, ``attn_flops_scale``) with its own ``source``; without it the scenario's spec-derived
compute defaults apply.

Lookups (:meth:`CostTable.transfer_seconds`):

- inside the measured grid of an (op, backend): log-log interpolation in item count along each measured item
  size, then log-log between the two item sizes that bracket the query;
- outside it: the fit, which is physically shaped (a fixed cost plus a linear part) and so extrapolates sanely;
  with ``max_extrapolation`` set, a query more than that factor beyond the grid in items or bytes raises
  :class:`CostLookupError` instead (strict mode);
- an (op, backend) with no entries and no fit raises :class:`CostLookupError`, naming the shape asked for and
  the nearest tabulated shape with its distance.

Results are memoised per instance: the engine calls these on its hot path with few distinct shapes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from sim.base.errors import InputError
from sim.base.fileio import write_text_atomic
from sim.base.inputs import number_problem, parse_json, read_text

__all__ = [
    "BACKENDS",
    "OPS",
    "SCHEMA",
    "VERSION",
    "ComparisonReport",
    "ComparisonRow",
    "CostEntry",
    "CostFit",
    "CostLookupError",
    "CostTable",
    "TableSource",
    "compare_tables",
    "default_cost_table",
    "load_cost_table",
    "parse_cost_table",
    "resolve_cost_table",
    "write_cost_table",
]

SCHEMA = "hicache-sim/cost-table"
VERSION = 1
OPS = ("h2d", "d2h", "swap_in")
BACKENDS = ("copy_engine", "batched", "kernel")
CEILINGS = ("h2d", "d2h", "h2d_bidir", "d2h_bidir")
SPEC_TABLE = "h200_spec.json"


class CostLookupError(InputError):
    """The engine asked for a shape the table cannot answer; the message names it and the nearest shape."""


@dataclass(frozen=True)
class TableSource:
    """Where the numbers come from. ``kind`` is ``measured`` or ``spec-derived``."""

    kind: str
    device: str
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    pcie: Mapping[str, Any] = field(default_factory=dict)
    copy_engines: int | None = None
    date: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CostEntry:
    """One timed shape. For ``swap_in``, ``n_items`` counts distinct misses (rows copied) over the batch."""

    op: str
    backend: str
    item_bytes: int
    n_items: int
    median_s: float
    p10_s: float
    p90_s: float
    n_requests: int | None = None
    top_k: int | None = None
    hit_ratio: float | None = None
    buffer_slots: int | None = None

    @property
    def key(self) -> tuple:
        return (
            self.op,
            self.backend,
            self.item_bytes,
            self.n_items,
            self.n_requests,
            self.top_k,
            self.hit_ratio,
        )

    def label(self) -> str:
        shape = f"{self.n_items} x {self.item_bytes} B"
        if self.op == "swap_in":
            shape = (
                f"{self.n_requests} req x top{self.top_k}, hit {self.hit_ratio:g}, {self.item_bytes} B rows"
            )
        return f"{self.op}/{self.backend} {shape}"


@dataclass(frozen=True)
class CostFit:
    """``seconds = latency_s + n_items * per_item_s + bytes / bandwidth_Bps`` for one (op, backend)."""

    latency_s: float
    bandwidth_Bps: float
    per_item_s: float = 0.0

    def seconds(self, n_items: int, total_bytes: int) -> float:
        return self.latency_s + n_items * self.per_item_s + total_bytes / self.bandwidth_Bps


@dataclass
class CostTable:
    """A loaded (validated) cost table; build one with :func:`load_cost_table` or :func:`parse_cost_table`."""

    source: TableSource
    ceilings: dict[str, float]
    entries: tuple[CostEntry, ...]
    fits: dict[tuple[str, str], CostFit]
    path: str | None = None
    version: int = VERSION
    max_extrapolation: float | None = None
    compute: dict[str, Any] = field(default_factory=dict)  # fitted step-time parameters and their "source"
    _rows: dict[tuple[str, str], dict[int, tuple[np.ndarray, np.ndarray]]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )
    _memo: dict[tuple, float] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        grouped: dict[tuple[str, str], dict[int, list[tuple[int, float]]]] = {}
        for e in self.entries:
            if e.op != "swap_in":
                grouped.setdefault((e.op, e.backend), {}).setdefault(e.item_bytes, []).append(
                    (e.n_items, e.median_s)
                )
        for key, by_bytes in grouped.items():
            self._rows[key] = {}
            for item_bytes, points in by_bytes.items():
                points.sort()
                n = np.log([max(p[0], 1) for p in points])
                t = np.log([max(p[1], 1e-12) for p in points])
                self._rows[key][item_bytes] = (n, t)

    # -- lookups --------------------------------------------------------------------------------------------
    def transfer_seconds(self, op: str, backend: str, n_items: int, item_bytes: int) -> float:
        """Seconds for one merged transfer of ``n_items`` items of ``item_bytes`` each; 0.0 for no items.

        Raises :class:`CostLookupError` when (op, backend) has no data, or in strict mode beyond the grid.
        """
        key = (op, backend, n_items, item_bytes)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        value = 0.0 if n_items <= 0 else self._transfer(op, backend, n_items, item_bytes)
        self._memo[key] = value
        return value

    def swap_in_seconds(
        self, n_requests: int, top_k: int, n_misses: int, row_bytes: int, backend: str = "kernel"
    ) -> float:
        """One HiSparse swap-in step for a batch: the fit over lookups (``n_requests * top_k``) and missed bytes.

        The swap-in grid has four dimensions (requests, top-k, hit ratio, row size), too sparse to interpolate
        in, so this always uses the fit; ``calibrate check`` still compares the measured entries one by one.
        """
        key = ("swap_in", backend, n_requests, top_k, n_misses, row_bytes)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        if n_misses < 0 or n_misses > n_requests * top_k:
            raise ValueError(
                f"n_misses={n_misses} must lie in [0, n_requests * top_k = {n_requests * top_k}]"
            )
        if n_requests <= 0 or top_k <= 0:
            value = 0.0
        else:
            fit = self.fits.get(("swap_in", backend))
            if fit is None:
                shape = f"{n_requests} req x top{top_k}, {n_misses} misses x {row_bytes} B"
                raise CostLookupError(self._missing_message("swap_in", backend, shape, n_misses, row_bytes))
            value = fit.seconds(n_requests * top_k, n_misses * row_bytes)
        self._memo[key] = value
        return value

    def _transfer(self, op: str, backend: str, n_items: int, item_bytes: int) -> float:
        rows = self._rows.get((op, backend), {})
        fit = self.fits.get((op, backend))
        shape = f"{n_items} x {item_bytes} B"
        if not rows and fit is None:
            raise CostLookupError(self._missing_message(op, backend, shape, n_items, item_bytes))
        interpolated = self._interpolate(rows, n_items, item_bytes)
        if interpolated is not None:
            return interpolated
        if self.max_extrapolation is not None and rows:
            factor = self._outside_factor(rows, n_items, item_bytes)
            if factor > self.max_extrapolation:
                raise CostLookupError(
                    f"{op}/{backend} {shape} lies {factor:.1f}x outside the measured grid (strict limit "
                    f"{self.max_extrapolation:g}x); {self._nearest(op, backend, n_items, item_bytes)}",
                    source=self.path,
                )
        if fit is None:
            raise CostLookupError(
                f"{op}/{backend} {shape} is outside the grid and the table has no fit to extrapolate with; "
                f"{self._nearest(op, backend, n_items, item_bytes)}",
                source=self.path,
            )
        return fit.seconds(n_items, n_items * item_bytes)

    @staticmethod
    def _row_time(row: tuple[np.ndarray, np.ndarray], n_items: int) -> float | None:
        log_n, log_t = row
        x = math.log(n_items)
        if x < log_n[0] - 1e-12 or x > log_n[-1] + 1e-12:
            return None
        return float(np.interp(x, log_n, log_t))

    def _interpolate(
        self, rows: dict[int, tuple[np.ndarray, np.ndarray]], n_items: int, item_bytes: int
    ) -> float | None:
        if not rows:
            return None
        sizes = sorted(rows)
        if item_bytes < sizes[0] or item_bytes > sizes[-1]:
            return None
        hi = next(s for s in sizes if s >= item_bytes)
        lo = max(s for s in sizes if s <= item_bytes)
        t_lo, t_hi = self._row_time(rows[lo], n_items), self._row_time(rows[hi], n_items)
        if t_lo is None or t_hi is None:
            return None
        if lo == hi:
            return math.exp(t_lo)
        w = (math.log(item_bytes) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return math.exp(t_lo + w * (t_hi - t_lo))

    @staticmethod
    def _outside_factor(
        rows: dict[int, tuple[np.ndarray, np.ndarray]], n_items: int, item_bytes: int
    ) -> float:
        sizes = sorted(rows)
        n_lo = min(round(math.exp(r[0][0])) for r in rows.values())
        n_hi = max(round(math.exp(r[0][-1])) for r in rows.values())
        return max(sizes[0] / item_bytes, item_bytes / sizes[-1], n_lo / n_items, n_items / n_hi, 1.0)

    def _nearest(self, op: str, backend: str, n_items: int, item_bytes: int) -> str:
        """The closest tabulated shape (same op/backend first, else any), distance as a factor per dimension."""
        pool = [e for e in self.entries if (e.op, e.backend) == (op, backend)] or list(self.entries)
        if not pool:
            return "the table has no entries at all"

        def distance(e: CostEntry) -> float:
            return math.hypot(
                math.log2(max(e.n_items, 1) / max(n_items, 1)), math.log2(e.item_bytes / max(item_bytes, 1))
            )

        best = min(pool, key=distance)
        items_f = max(best.n_items, 1) / max(n_items, 1)
        bytes_f = best.item_bytes / max(item_bytes, 1)
        return (
            f"nearest measured shape: {best.label()} "
            f"({_factor(items_f)} items, {_factor(bytes_f)} bytes per item)"
        )

    def _missing_message(self, op: str, backend: str, shape: str, n_items: int, item_bytes: int) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"cost table{where} has no {op}/{backend} data for {shape}; {self._nearest(op, backend, n_items, item_bytes)}"

    # -- provenance -----------------------------------------------------------------------------------------
    def describe(self) -> str:
        """One line naming the table and where its numbers came from (spec-derived tables always say so)."""
        name = self.path or SPEC_TABLE
        s = self.source
        fit = self.compute.get("source") if self.compute_params else None
        fitted = (f"; step times fitted to {fit.get('device')} measurements ({fit.get('points')} points, "
                  f"calibrate compute)" if isinstance(fit, dict) else "")  # fmt: skip
        if s.kind == "spec-derived":
            return f"{name} ({'copy costs ' if fitted else ''}spec-derived, {s.device}, not measured{fitted})"
        parts = [f"measured on {s.device}"]
        parts += [
            f"{label} {v}" for label, v in (("driver", s.driver), ("CUDA", s.cuda), ("torch", s.torch)) if v
        ]
        if s.triton:
            parts.append(f"triton {s.triton}")
        if s.date:
            parts.append(s.date)
        return f"{name} ({', '.join(parts)}{fitted})"

    def to_json(self) -> dict[str, Any]:
        s = self.source
        entries = []
        for e in self.entries:
            row = {k: getattr(e, k) for k in ("op", "backend", "item_bytes", "n_items")}
            if e.op == "swap_in":
                row.update(
                    n_requests=e.n_requests, top_k=e.top_k, hit_ratio=e.hit_ratio, buffer_slots=e.buffer_slots
                )
            row.update(median_s=e.median_s, p10_s=e.p10_s, p90_s=e.p90_s)
            entries.append(row)
        return {
            "schema": SCHEMA,
            "version": self.version,
            "source": {
                "kind": s.kind,
                "device": s.device,
                "driver": s.driver,
                "cuda": s.cuda,
                "torch": s.torch,
                "triton": s.triton,
                "pcie": dict(s.pcie),
                "copy_engines": s.copy_engines,
                "date": s.date,
                "notes": list(s.notes),
            },
            "ceilings": dict(self.ceilings),
            "entries": entries,
            "fits": [
                {
                    "op": op,
                    "backend": be,
                    "latency_s": f.latency_s,
                    "per_item_s": f.per_item_s,
                    "bandwidth_Bps": f.bandwidth_Bps,
                }
                for (op, be), f in sorted(self.fits.items())
            ],
            **({"compute": dict(self.compute)} if self.compute else {}),
        }

    @property
    def compute_params(self) -> dict[str, float]:
        """The fitted step-time parameters, without their source."""
        return {k: v for k, v in self.compute.items() if k != "source"}


def _factor(f: float) -> str:
    if abs(f - 1.0) < 1e-9:
        return "same"
    return f"{f:.3g}x more" if f > 1 else f"{1 / f:.3g}x fewer"


# -- parsing ------------------------------------------------------------------------------------------------
class _Reader:
    """Field access that names the file and the JSON path in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> InputError:
        return InputError(f"{where}: {message}", source=self.source)

    def obj(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def num(
        self,
        obj: dict,
        key: str,
        where: str,
        *,
        integer: bool = False,
        positive: bool = False,
        optional: bool = False,
    ):
        if key not in obj or obj[key] is None:
            if optional:
                return None
            raise self.fail(f"{where}.{key}", "missing")
        v = obj[key]
        kind = "an integer" if integer else "a number"
        if isinstance(v, bool) or not isinstance(v, int | float) or (integer and not isinstance(v, int)):
            raise self.fail(f"{where}.{key}", f"must be {kind}, got {v!r}")
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise self.fail(
                f"{where}.{key}", f"must be {'positive' if positive else 'non-negative'}, got {v!r}"
            )
        problem = number_problem(v, floor=False)  # a per-item time is rightly below 1e-6 s
        if problem is not None:
            raise self.fail(f"{where}.{key}", problem)
        return v

    def choice(self, obj: dict, key: str, where: str, allowed: tuple[str, ...]) -> str:
        v = obj.get(key)
        if v not in allowed:
            raise self.fail(f"{where}.{key}", f"must be one of {', '.join(allowed)}, got {v!r}")
        return v

    def text(self, obj: dict, key: str, where: str, *, optional: bool = True) -> str | None:
        v = obj.get(key)
        if v is None and optional:
            return None
        if not isinstance(v, str):
            raise self.fail(f"{where}.{key}", f"must be a string, got {v!r}")
        return v


def parse_cost_table(data: Any, source: str, *, max_extrapolation: float | None = None) -> CostTable:
    """Validate decoded JSON into a :class:`CostTable`; raises :class:`InputError` naming ``source`` and the field.

    Sections are read in file order (header, source, ceilings, entries, fits, compute): the first bad field is
    the one reported."""
    r = _Reader(source)
    top = r.obj(data, "table")
    if top.get("schema") != SCHEMA:
        raise r.fail("schema", f"expected {SCHEMA!r}, got {top.get('schema')!r}")
    version = top.get("version")
    if version != VERSION:
        raise r.fail("version", f"unknown cost-table version {version!r}; this build reads version {VERSION}")
    source_info = _parse_source(r, top.get("source"))
    ceil = r.obj(top.get("ceilings"), "ceilings")
    ceilings = {name: float(r.num(ceil, name, "ceilings", positive=True)) for name in CEILINGS}
    entries = _parse_entries(r, top.get("entries"))
    fits = _parse_fits(r, top.get("fits"))
    _check_physics(r, _host_link(source_info), ceilings, entries, fits)
    compute = _parse_compute(r, top["compute"]) if top.get("compute") is not None else {}
    return CostTable(source_info, ceilings, tuple(entries), fits, source, version, max_extrapolation, compute)


# What physics allows a timed host-device transfer. PCIe's wire rate per lane and direction, GB/s, by generation
# (128b/130b encoding from Gen3; Gen6 FLIT); where a table names no PCIe link, NVLink-C2C's 450 GB/s a direction
# (GH200), the fastest CPU-GPU link built. No GPU operation timed from the host ends in under 0.1 us: a kernel
# launch or a copy-engine submission alone takes microseconds, and CUDA events resolve about 0.5 us.
PCIE_LANE_GBPS = {"3": 0.985, "4": 1.969, "5": 3.938, "6": 7.563}
FASTEST_HOST_LINK_BPS = 450e9
MIN_TIMED_S = 1e-7


def _host_link(src: TableSource) -> tuple[float, str]:
    """(bytes per second, name) of the fastest the table's host link can carry, one direction."""
    gen, width = str(src.pcie.get("gen_max")), str(src.pcie.get("width_max"))
    if gen in PCIE_LANE_GBPS and width.isdigit() and int(width) > 0:
        return PCIE_LANE_GBPS[gen] * int(width) * 1e9, f"PCIe Gen{gen} x{width} link (source.pcie)"
    return FASTEST_HOST_LINK_BPS, "fastest host link built (NVLink-C2C)"


def _check_physics(r: _Reader, link: tuple[float, str], ceilings: dict[str, float], entries: list[CostEntry],
                   fits: dict[tuple[str, str], CostFit]) -> None:  # fmt: skip
    """A timing below what the physics allows is a broken measurement, not a faster machine: refused, so no
    check calls it an improvement and no run uses it."""
    bps, name = link
    too_fast = f"faster than the {name} carries ({bps / 1e9:g} GB/s)"
    for key, gbps in ceilings.items():
        if gbps * 1e9 > bps:
            raise r.fail(f"ceilings.{key}", f"{gbps:g} GB/s is {too_fast}")
    for i, e in enumerate(entries):
        for field_name in ("median_s", "p10_s", "p90_s"):
            t = getattr(e, field_name)
            if t < MIN_TIMED_S:
                raise r.fail(f"entries[{i}].{field_name}", f"{t:g} s is faster than any GPU operation timed from the "
                             f"host (at least {MIN_TIMED_S:g} s)")  # fmt: skip
        moved = e.n_items * e.item_bytes
        if moved / e.median_s > bps:
            raise r.fail(f"entries[{i}].median_s", f"{moved:,} B in {e.median_s:g} s is "
                         f"{moved / e.median_s / 1e9:,.4g} GB/s, {too_fast}")  # fmt: skip
    for (op, backend), fit in fits.items():
        if fit.bandwidth_Bps > bps:
            raise r.fail(f"fits {op}/{backend}.bandwidth_Bps", f"{fit.bandwidth_Bps / 1e9:,.4g} GB/s is {too_fast}")


def _parse_source(r: _Reader, value: Any) -> TableSource:
    src = r.obj(value, "source")
    kind = r.choice(src, "kind", "source", ("measured", "spec-derived"))
    device = r.text(src, "device", "source", optional=False)
    notes = src.get("notes") or []
    return TableSource(
        kind=kind,
        device=device,
        driver=r.text(src, "driver", "source"),
        cuda=r.text(src, "cuda", "source"),
        torch=r.text(src, "torch", "source"),
        triton=r.text(src, "triton", "source"),
        pcie=r.obj(src.get("pcie") or {}, "source.pcie"),
        copy_engines=r.num(src, "copy_engines", "source", integer=True, optional=True),
        date=r.text(src, "date", "source"),
        notes=tuple(str(n) for n in (notes if isinstance(notes, list) else [notes])),
    )


def _parse_entries(r: _Reader, raw_entries: Any) -> list[CostEntry]:
    if not isinstance(raw_entries, list) or not raw_entries:
        raise r.fail("entries", "expected a non-empty list (a cost table holds at least one timed entry)")
    return [_parse_entry(r, raw, f"entries[{i}]") for i, raw in enumerate(raw_entries)]


def _parse_entry(r: _Reader, raw: Any, where: str) -> CostEntry:
    """One timed entry; a ``swap_in`` (HiSparse) entry also needs its batch shape and may have zero items."""
    e = r.obj(raw, where)
    op = r.choice(e, "op", where, OPS)
    swap = op == "swap_in"
    entry = CostEntry(
        op=op,
        backend=r.choice(e, "backend", where, BACKENDS),
        item_bytes=r.num(e, "item_bytes", where, integer=True, positive=True),
        n_items=r.num(e, "n_items", where, integer=True, positive=not swap),
        median_s=float(r.num(e, "median_s", where)),
        p10_s=float(r.num(e, "p10_s", where)),
        p90_s=float(r.num(e, "p90_s", where)),
        n_requests=r.num(e, "n_requests", where, integer=True, positive=True, optional=not swap),
        top_k=r.num(e, "top_k", where, integer=True, positive=True, optional=not swap),
        hit_ratio=r.num(e, "hit_ratio", where, optional=not swap),
        buffer_slots=r.num(e, "buffer_slots", where, integer=True, optional=True),
    )
    if entry.hit_ratio is not None and entry.hit_ratio > 1:
        raise r.fail(f"{where}.hit_ratio", f"must be at most 1, got {entry.hit_ratio!r}")
    return entry


def _parse_fits(r: _Reader, raw_fits: Any) -> dict[tuple[str, str], CostFit]:
    if not isinstance(raw_fits, list):
        raise r.fail("fits", "expected a list")
    fits: dict[tuple[str, str], CostFit] = {}
    for i, raw in enumerate(raw_fits):
        where = f"fits[{i}]"
        f = r.obj(raw, where)
        key = (r.choice(f, "op", where, OPS), r.choice(f, "backend", where, BACKENDS))
        fits[key] = CostFit(
            latency_s=float(r.num(f, "latency_s", where)),
            bandwidth_Bps=float(r.num(f, "bandwidth_Bps", where, positive=True)),
            per_item_s=float(r.num(f, "per_item_s", where, optional=True) or 0.0),
        )
    return fits


def _parse_compute(r: _Reader, value: Any) -> dict[str, Any]:
    """The fitted step-time parameters (``calibrate compute``) with their source."""
    from sim.model.compute import FITTED

    raw = r.obj(value, "compute")
    unknown = sorted(set(raw) - {*FITTED, "source"})
    if unknown:
        raise r.fail(f"compute.{unknown[0]}", f"unknown field (known: {', '.join(FITTED)}, source)")
    compute = {k: float(r.num(raw, k, "compute", positive=k != "step_overhead_ms")) for k in FITTED if k in raw}
    for k in ("mfu", "mbu"):
        if compute.get(k, 0) > 1:
            raise r.fail(f"compute.{k}", f"must be at most 1, got {compute[k]!r}")
    compute["source"] = r.obj(raw.get("source") or {}, "compute.source")
    return compute


def load_cost_table(path: str | Path, *, max_extrapolation: float | None = None) -> CostTable:
    """Read and validate a cost-table file; corrupt, truncated or invalid files raise :class:`InputError`."""
    source = str(path)
    data = parse_json(read_text(path, "cost table"), source, what="JSON (corrupt or truncated?)")
    return parse_cost_table(data, source, max_extrapolation=max_extrapolation)


def default_cost_table() -> CostTable:
    """The bundled spec-derived H200 table (``sim/data/h200_spec.json``, generated by ``calibrate/spec.py``)."""
    text = resources.files("sim").joinpath("data", SPEC_TABLE).read_text()
    return parse_cost_table(json.loads(text), SPEC_TABLE)


def resolve_cost_table(name: str | None, *, search_dir: str | Path = "calibrations") -> CostTable:
    """What a scenario's ``cost_table`` names: None -> the spec default; a path; or NAME -> search_dir/NAME.json."""
    if name is None:
        return default_cost_table()
    path = Path(name)
    if not path.exists() and path.suffix != ".json":
        path = Path(search_dir) / f"{name}.json"
    return load_cost_table(path)


def write_cost_table(table: CostTable, path: str | Path) -> None:
    """Write atomically, after checking that the JSON reads back into an equal table."""
    data = table.to_json()
    parse_cost_table(json.loads(json.dumps(data)), str(path))
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


# -- regression check ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ComparisonRow:
    """One shape present in both tables; ``change`` is new/base - 1 of the time (of the bandwidth, for ceilings)."""

    label: str
    base: float
    new: float
    change: float
    unit: str  # "s", "ms", "x" (higher is worse: times, a FLOPs scale) or "GB/s", "eff" (lower is worse)

    @property
    def worse(self) -> float:
        """How much worse, as a positive fraction; negative when better."""
        return self.change if self.unit in ("s", "ms", "x") else -self.change


@dataclass
class ComparisonReport:
    """Entry-by-entry comparison of a new table against a baseline; :attr:`exit_code` 1 on any regression."""

    tolerance: float
    rows: list[ComparisonRow]
    only_new: list[str]
    only_base: list[str]
    warnings: list[str]

    @property
    def regressions(self) -> list[ComparisonRow]:
        return [r for r in self.rows if r.worse > self.tolerance]

    @property
    def improvements(self) -> list[ComparisonRow]:
        return [r for r in self.rows if r.worse < -self.tolerance]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def format(self) -> str:
        lines = [f"compared {len(self.rows)} shapes, tolerance {self.tolerance:.0%}"]
        lines += [f"warning: {w}" for w in self.warnings]
        for title, rows in (("regressions", self.regressions), ("improvements", self.improvements)):
            lines.append(f"{title}: {len(rows)}")
            if rows:
                lines.append(f"  {'shape':<64} {'baseline':>12} {'new':>12} {'change':>8}")
                lines += [
                    f"  {r.label:<64} {_fmt(r.base, r.unit):>12} {_fmt(r.new, r.unit):>12} {r.change:>+8.1%}"
                    for r in rows
                ]
        if self.only_new or self.only_base:
            lines.append(
                f"unmatched: {len(self.only_new)} only in new, {len(self.only_base)} only in baseline"
            )
        lines.append("FAIL" if self.exit_code else "OK")
        return "\n".join(lines)


def _fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1e6:.2f} us"
    return f"{value:.2f} GB/s" if unit == "GB/s" else f"{value:.3f} {unit}"


# A fitted step-time parameter's unit for the comparison: higher overhead or attention scale is slower, higher
# efficiency faster (``calibrate compute``'s PARAMS).
_COMPUTE_UNITS = {"step_overhead_ms": "ms", "attn_flops_scale": "x", "mfu": "eff", "mbu": "eff"}


def _compute_rows(new: CostTable, baseline: CostTable, warnings: list[str]) -> list[ComparisonRow]:
    """The two fits' step-time parameters side by side (a table without a fit: a warning, no rows)."""
    a, b = baseline.compute_params, new.compute_params
    if bool(a) != bool(b):
        warnings.append(f"only the {'new' if b else 'baseline'} table has a compute fit: its step times are not compared")
    return [ComparisonRow(f"compute {k}", a[k], b[k], b[k] / a[k] - 1 if a[k] else 0.0, unit)
            for k, unit in _COMPUTE_UNITS.items() if k in a and k in b]  # fmt: skip


def compare_tables(
    new: CostTable, baseline: CostTable, tolerance: float, allow_device_change: bool = False
) -> ComparisonReport:
    """Match entries by (op, backend, shape) and ceilings by name; raises :class:`InputError` when the tables
    are incompatible: a different schema version, or a different device unless ``allow_device_change``."""
    if new.version != baseline.version:
        raise InputError(
            f"incompatible cost tables: schema version {new.version} vs baseline {baseline.version}"
        )
    warnings = []
    if new.source.device != baseline.source.device:
        if not allow_device_change:
            raise InputError(
                f"incompatible cost tables: device {new.source.device!r} vs baseline {baseline.source.device!r} "
                "(pass --allow-device-change to compare anyway)"
            )
        warnings.append(f"device changed: {baseline.source.device} -> {new.source.device}")
    for attr in ("driver", "cuda", "torch", "triton"):
        a, b = getattr(baseline.source, attr), getattr(new.source, attr)
        if a != b:
            warnings.append(f"{attr} changed: {a} -> {b}")
    base_by_key = {e.key: e for e in baseline.entries}
    new_by_key = {e.key: e for e in new.entries}
    rows = [
        ComparisonRow(
            n.label(), b.median_s, n.median_s, n.median_s / b.median_s - 1 if b.median_s > 0 else 0.0, "s"
        )
        for key, n in new_by_key.items()
        if (b := base_by_key.get(key)) is not None
    ]
    rows += [
        ComparisonRow(
            f"ceiling {name}",
            baseline.ceilings[name],
            new.ceilings[name],
            new.ceilings[name] / baseline.ceilings[name] - 1,
            "GB/s",
        )
        for name in CEILINGS
    ]
    rows += _compute_rows(new, baseline, warnings)
    if not any(key in base_by_key for key in new_by_key):
        raise InputError("no entry of the new table has the op, backend and shape of one in the baseline: nothing "
                         "to check (were they timed with different suites?)")  # fmt: skip
    only_new = [n.label() for k, n in new_by_key.items() if k not in base_by_key]
    only_base = [b.label() for k, b in base_by_key.items() if k not in new_by_key]
    return ComparisonReport(tolerance, rows, only_new, only_base, warnings)
