"""Parameter sweeps: the cartesian product of ``--grid`` axes over one scenario, run in parallel, resumable.

State owned here: the sweep folder. ``DIR/points/<point_id>.json`` holds one finished point (written
atomically the moment it finishes, so a killed sweep loses nothing it finished); ``DIR/sweep.parquet`` is
rebuilt from those after each completion, one row per point in grid order; ``DIR/sweep.yaml`` records the
resolved base scenario and the grid so the sweep can be rerun (``hicache-sim sweep DIR/sweep.yaml``).

A point id is a short hash of the resolved scenario YAML, so a restarted sweep skips exactly the points
whose scenario it has already run. Every point is validated before anything runs or is written. Rows hold
only simulated quantities (no wall-clock time), so local processes and Ray give identical tables.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml

from sim.errors import InputError
from sim.fileio import atomic_path, write_text_atomic
from sim.metrics import dropped_by_reason
from sim.scenario import (
    Scenario,
    apply_overrides,
    dump_resolved,
    field_paths,
    load_scenario,
    scenario_from_dict,
)

__all__ = [
    "Axis",
    "Point",
    "SweepPlan",
    "flat_metrics",
    "format_rows",
    "parse_grid",
    "plan_sweep",
    "point_id",
    "run_sweep",
    "table",
]

Executor = Literal["local", "ray"]
SWEEP_FILE_KEYS = {"sweep", "scenario"}


@dataclass(frozen=True)
class Axis:
    """One ``--grid key=v1,v2`` axis: a dotted field path and its values (parsed as YAML) in the given order."""

    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Point:
    """One grid point: its validated scenario and the grid values that made it."""

    index: int
    params: dict[str, Any]
    scenario: Scenario
    point_id: str


@dataclass
class SweepPlan:
    """A validated sweep: every point checked, nothing run or written yet."""

    source: str
    base: Scenario
    overrides: list[str]
    axes: list[Axis]
    points: list[Point] = field(default_factory=list)

    def describe(self) -> dict:
        """What ``DIR/sweep.yaml`` holds: enough to rerun the same points."""
        return {
            "sweep": {
                "source": self.source,
                "set": list(self.overrides),
                "grid": {a.key: list(a.values) for a in self.axes},
                "points": len(self.points),
            },
            "scenario": yaml.safe_load(dump_resolved(self.base)),
        }


# ------------------------------------------------------------------------------------------ planning


def parse_grid(specs: Iterable[str]) -> list[Axis]:
    """``key.path=v1,v2,...`` strings -> axes. Raises InputError naming the bad spec or key."""
    known = field_paths(Scenario)
    axes: dict[str, Axis] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = key.strip()
        where = f"--grid {spec}"
        if not sep or not key or not raw.strip():
            raise InputError("expected key.path=v1,v2,...", source=where)
        if key not in known:
            raise InputError(f"{key}: unknown field", source=where)
        if key in axes:
            raise InputError(f"{key}: given twice", source=where)
        values = []
        for text in raw.split(","):
            try:
                values.append(yaml.safe_load(text) if text.strip() else None)
            except yaml.YAMLError:
                raise InputError(f"{key}: cannot parse value {text!r}", source=where) from None
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise InputError(f"{key}: a value is repeated", source=where)
        axes[key] = Axis(key, tuple(values))
    return list(axes.values())


def point_id(scenario: Scenario) -> str:
    """Short stable id of a resolved scenario: the first 12 hex digits of the SHA-256 of its YAML."""
    return hashlib.sha256(dump_resolved(scenario).encode()).hexdigest()[:12]


def plan_sweep(path: str | Path, grid: Sequence[str], overrides: Sequence[str] = ()) -> SweepPlan:
    """Load the base scenario (or a ``sweep.yaml``), apply the grid, validate every point. Raises InputError.

    With a ``sweep.yaml`` the recorded scenario and grid are the base; ``grid`` axes replace recorded ones
    with the same key and ``overrides`` apply on top of the recorded scenario.
    """
    path = Path(path)
    recorded = _read_sweep_file(path)
    if recorded is None:
        base = load_scenario(path, overrides)
        axes = parse_grid(grid)
    else:
        data = apply_overrides(recorded["scenario"], overrides)
        base = scenario_from_dict(data, source=str(path), base_dir=path.parent)
        given = {a.key: a for a in parse_grid(grid)}
        old = [f"{k}={','.join(_yaml_scalar(v) for v in vs)}" for k, vs in recorded["sweep"]["grid"].items()]
        axes = [given.pop(a.key, a) for a in parse_grid(old)] + list(given.values())
        overrides = list(recorded["sweep"].get("set", [])) + list(overrides)
    if not axes:
        raise InputError("no --grid axis given (e.g. --grid hicache.load_back_threshold=1,10,64)")
    plan = SweepPlan(str(path), base, list(overrides), axes)
    base_data = base.model_dump(mode="json")
    for index, combo in enumerate(itertools.product(*(a.values for a in axes))):
        params = dict(zip((a.key for a in axes), combo))
        items = [f"{k}={_yaml_scalar(v)}" for k, v in params.items()]
        data = apply_overrides(base_data, items)
        blame = {k: f"--grid {k}={_yaml_scalar(v)}" for k, v in params.items()}
        sc = scenario_from_dict(data, source=str(path), base_dir=path.parent, overridden=blame)
        plan.points.append(Point(index, params, sc, point_id(sc)))
    return plan


def _read_sweep_file(path: Path) -> dict | None:
    """The recorded sweep if ``path`` is a ``sweep.yaml`` this module wrote, else None."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # load_scenario reports it properly
    if isinstance(data, dict) and set(data) == SWEEP_FILE_KEYS and isinstance(data["sweep"], dict):
        return data
    return None


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# ------------------------------------------------------------------------------------------ one point


def flat_metrics(summary: dict) -> dict[str, Any]:
    """The scalar columns of one sweep row, from ``sim.run.summarise``'s nested summary.

    ``load_back_tokens`` is the largest per-pool count: kv-anchored and SWA-anchored pools are loaded back
    separately (a device kv hit can still need its SWA window from the host).
    """
    t, ttft, hit, util = (
        summary["throughput"],
        summary["ttft_s"],
        summary["hit_rate"],
        summary["link_utilization"],
    )
    m = summary.get("metrics", {})
    row: dict[str, Any] = {
        "input_tokens_per_s": t["input_tokens_per_s"],
        "output_tokens_per_s": t["output_tokens_per_s"],
        "requests_per_s": t["requests_per_s"],
        **{f"ttft_{k}_s": ttft[k] for k in ("mean", "p50", "p90", "p99")},
        **{f"hit_{k}": hit[k] for k in ("device", "host", "storage", "total")},
        "dropped_tokens": sum(dropped_by_reason(m).values()),
        "load_back_tokens": max(m.get("load_back_tokens_total", {}).values(), default=0),
        "backup_bytes": m.get("hicache_backup_bytes_total", 0),
        "prefetched_tokens": m.get("prefetched_tokens_total", 0),
        **{f"util_{k}": util.get(k, 0.0) for k in ("h2d", "d2h", "l3_read", "l3_write")},
        "admission_stalls": summary["engine"]["admission_stalls"],
        "finished_requests": summary["requests"]["finished"],
        "simulated_s": summary["simulated_s"],
    }
    for key, value in summary.get("hisparse", {}).items():
        if isinstance(value, (int, float, bool, str)) or value is None:
            row[f"hisparse_{key}"] = value
    return row


def _run_point(scenario: Scenario) -> dict[str, Any]:
    """Worker body (a process or a Ray task): run one scenario, return its flat metrics."""
    from sim.run import run_scenario

    metrics = flat_metrics(run_scenario(scenario).summary)
    return json.loads(json.dumps(metrics, default=_json_default))  # the values a json file gives back


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")


# ------------------------------------------------------------------------------------------ running


def run_sweep(plan: SweepPlan, out_dir: str | Path, *, executor: Executor = "local", workers: int | None = None,
              ray_address: str | None = None, progress: bool = False,
              max_points: int | None = None) -> pd.DataFrame:  # fmt: skip
    """Run the points not already in ``out_dir/points``; return the table of all finished points.

    ``max_points`` stops after that many new points (how tests stand in for an interrupted sweep).
    """
    from tqdm import tqdm

    out = Path(out_dir)
    points_dir = out / "points"
    write_text_atomic(out / "sweep.yaml", yaml.safe_dump(plan.describe(), sort_keys=False))
    done: dict[str, dict] = {}
    for p in plan.points:
        record = _read_point(points_dir / f"{p.point_id}.json")
        if record is not None:
            done[p.point_id] = record
    todo = [p for p in plan.points if p.point_id not in done]
    if max_points is not None:
        todo = todo[:max_points]
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=len(plan.points), initial=len(done), unit="point", desc="sweep", disable=not progress,
               file=sys.stderr)  # fmt: skip
    _write_table(plan, done, out)
    run = _run_ray if executor == "ray" else _run_local
    try:
        for p, metrics in run(todo, workers, ray_address):
            done[p.point_id] = {"point_id": p.point_id, "params": p.params, "seed": p.scenario.seed,
                                "scenario": p.scenario.name, "metrics": metrics}  # fmt: skip
            write_text_atomic(
                points_dir / f"{p.point_id}.json", json.dumps(done[p.point_id], indent=1) + "\n"
            )
            _write_table(plan, done, out)
            bar.update()
    finally:
        bar.close()
    return table(plan, done)


def _read_point(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # absent, or not ours: run it again
    return record if isinstance(record, dict) and isinstance(record.get("metrics"), dict) else None


def _run_local(todo: list[Point], workers: int, _address: str | None) -> Iterator[tuple[Point, dict]]:
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if not todo:
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
        futures = {pool.submit(_run_point, p.scenario): p for p in todo}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.cancel()


def _run_ray(todo: list[Point], workers: int, address: str | None) -> Iterator[tuple[Point, dict]]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray (pip install 'hicache-sim[ray]')") from None
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(
                num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
            )
    try:
        task = ray.remote(num_cpus=1)(_run_point)
        refs = {task.remote(p.scenario): p for p in todo}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        if started:
            ray.shutdown()


# ------------------------------------------------------------------------------------------ output


def table(plan: SweepPlan, done: dict[str, dict]) -> pd.DataFrame:
    """One row per finished point, in grid order: point_id, grid columns, seed, flat metrics."""
    rows = []
    for p in plan.points:
        record = done.get(p.point_id)
        if record is None:
            continue
        row = {"point_id": p.point_id, **p.params}
        row.setdefault("seed", p.scenario.seed)
        rows.append({**row, **record["metrics"]})
    keys = [a.key for a in plan.axes]
    columns = ["point_id", *keys, *([] if "seed" in keys else ["seed"])]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=columns)
    return df[columns + [c for c in df.columns if c not in columns]].reset_index(drop=True)


def _write_table(plan: SweepPlan, done: dict[str, dict], out: Path) -> None:
    with atomic_path(out / "sweep.parquet") as tmp:
        table(plan, done).to_parquet(tmp, index=False)


SUMMARY_COLUMNS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("input_tokens_per_s", "in tok/s", lambda v: f"{v:,.0f}"),
    ("ttft_p50_s", "TTFT p50 s", lambda v: f"{v:.3f}"),
    ("ttft_p90_s", "TTFT p90 s", lambda v: f"{v:.3f}"),
    ("hit_device", "hit L1", lambda v: f"{v:.1%}"),
    ("hit_host", "hit L2", lambda v: f"{v:.1%}"),
    ("hit_storage", "hit L3", lambda v: f"{v:.1%}"),
    ("hit_total", "hit total", lambda v: f"{v:.1%}"),
    ("dropped_tokens", "dropped", lambda v: f"{v:,}"),
)


def format_rows(df: pd.DataFrame, grid_keys: Sequence[str]) -> str:
    """The compact table ``hicache-sim sweep`` prints: grid columns (last path part) then key metrics."""
    if df.empty:
        return "(no finished points)"
    heads = [k.rsplit(".", 1)[-1] for k in grid_keys] + [h for c, h, _ in SUMMARY_COLUMNS if c in df]
    cells = [
        [str(r[k]) for k in grid_keys] + [fmt(r[c]) for c, _, fmt in SUMMARY_COLUMNS if c in df]
        for _, r in df.iterrows()
    ]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
