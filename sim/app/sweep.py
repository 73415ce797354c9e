"""Parameter sweeps: the cartesian product of ``--grid`` axes over one scenario, run in parallel, resumable.

State owned here: the sweep folder. ``DIR/points/<point_id>.json`` holds one finished point (written
atomically the moment it finishes, so a killed sweep loses nothing it finished); ``DIR/sweep.parquet`` is
rebuilt from those after each completion, one row per point in grid order; ``DIR/sweep.yaml`` records the
resolved base scenario and the grid so the sweep can be rerun (``hicache-sim sweep DIR/sweep.yaml``).
A folder holds one sweep: rerunning the same sweep there resumes it, another one is refused unless asked
to replace it. A point that fails is a row with ``status`` "failed" and its one-line ``error``; the others
go on, and a resumed sweep tries the failed points again. Local workers exit when the sweep process dies.

A point id is a short hash of the resolved scenario YAML, so a restarted sweep skips exactly the points
whose scenario it has already run. Every point is validated before anything runs or is written. Rows hold
only simulated quantities (no wall-clock time), so local processes and Ray give identical tables.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml

from sim.app.parallel import connect_ray, in_processes
from sim.base.errors import InputError
from sim.base.fileio import atomic_path, check_output_folder, claim_folder, write_text_atomic
from sim.base.inputs import parse_yaml, read_text
from sim.scenario.load import (
    Scenario,
    apply_overrides,
    dump_resolved,
    field_paths,
    load_scenario,
    reblame,
    scenario_from_dict,
)
from sim.serve.metrics import dropped_by_reason

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
        values = [parse_yaml(text, where) if text.strip() else None for text in raw.split(",")]  # as --set reads
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
        try:
            sc = scenario_from_dict(data, source=str(path), base_dir=path.parent, overridden=blame)
        except InputError as exc:  # the base is valid: an error of a point is its grid values' doing
            if not str(exc).startswith(f"{path}: "):
                raise

            def without(key: str, params: dict = params) -> None:
                doc = apply_overrides(base_data, [f"{k}={_yaml_scalar(v)}" for k, v in params.items() if k != key])
                scenario_from_dict(doc, source=str(path), base_dir=path.parent)

            raise reblame(exc, str(path), blame, without) from None
        plan.points.append(Point(index, _as_validated(params, sc), sc, point_id(sc)))
    _check_startable(plan.points)
    return plan


def _as_validated(params: dict[str, Any], sc: Scenario) -> dict[str, Any]:
    """Each grid value as the scenario holds it (``2`` for a float field is 2.0), so a column has one type."""
    dumped = sc.model_dump(mode="json")
    out = {}
    for key, value in params.items():
        node: Any = dumped
        for part in key.split("."):
            node = node.get(part, value) if isinstance(node, dict) else value
        out[key] = node
    return out


def _one_type(column: pd.Series) -> pd.Series:
    """A grid column whose values still differ in type (a number or ``cap``) as text, so Parquet can hold it."""
    kinds = {type(v) for v in column if v is not None}
    return column if len(kinds) <= 1 or kinds <= {int, float} else column.map(lambda v: None if v is None else str(v))


def _check_startable(points: list[Point]) -> None:
    """What each point reads at start (cost table, traces, the step-time estimator), checked once per
    distinct set of inputs."""
    from sim.app.run import check_startable

    seen: set[str] = set()
    for p in points:
        sc = p.scenario
        key = json.dumps([sc.hardware.cost_table, sc.workload.model_dump(mode="json"), sc.hicache.page_size,
                          sc.cluster.role, sc.hisparse.enabled, sc.model.model_dump(mode="json"),
                          sc.hisparse.access.trace_path, sc.compute.decode_bytes_per_step,
                          sc.compute.backend, sc.hardware.model_dump(mode="json")])  # fmt: skip
        if key not in seen:
            seen.add(key)
            try:
                check_startable(sc)
            except InputError as exc:  # the base started (it was checked as a point too): the grid's doing
                grid = " and ".join(f"--grid {k}={_yaml_scalar(v)}" for k, v in p.params.items())
                raise InputError(str(exc), source=grid) from None


def _read_sweep_file(path: Path) -> dict | None:
    """The recorded sweep if ``path`` is a ``sweep.yaml`` this module wrote, else None."""
    try:
        data = parse_yaml(read_text(path, "scenario"), str(path))
    except InputError:
        return None  # load_scenario reports it properly
    if isinstance(data, dict) and set(data) == SWEEP_FILE_KEYS and isinstance(data["sweep"], dict):
        return data
    return None


def _yaml_scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


# ------------------------------------------------------------------------------------------ one point


def flat_metrics(summary: dict) -> dict[str, Any]:
    """The scalar columns of one sweep row, from ``sim.app.run.summarise``'s nested summary.

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
    agentx = summary.get("client", {})
    if agentx.get("client") == "aiperf_agentic" and "duration_s" in agentx:  # a lane replay: AgentX's figures
        row.update({"agentx_tok_per_s_per_gpu": agentx["tok_per_s_per_gpu"],
                    "agentx_ttft_mean_s": agentx["ttft_s"]["mean"], "agentx_ttft_p50_s": agentx["ttft_s"]["p50"],
                    "agentx_itl_p90_s": agentx["itl_s"]["p90"], "agentx_prefix_hit": agentx["prefix_hit"],
                    "agentx_gpu_hit": agentx["gpu_hit"], "agentx_cpu_hit": agentx["cpu_hit"],
                    **{f"agentx_{k}_{q}": agentx[k][q] for k in ("queue_req", "running_req") for q in ("p50", "p90")},
                    "agentx_full_token_usage": agentx["full_token_usage"]["mean"]})  # fmt: skip
    for key, value in summary.get("hisparse", {}).items():
        if isinstance(value, (int, float, bool, str)) or value is None:
            row[f"hisparse_{key}"] = value
    return row


def _run_point(scenario: Scenario) -> dict[str, Any]:
    """Worker body (a process or a Ray task): run one scenario. Returns ``{"status": "ok", "metrics": ...}``
    or, if it raised, ``{"status": "failed", "error": one line, "traceback": ...}`` so the sweep goes on."""
    import traceback

    from sim.app.run import run_scenario

    try:
        metrics = flat_metrics(run_scenario(scenario, keep_requests=False).summary)
    except Exception as exc:  # a point's failure is data for its row, not the end of the sweep
        error = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "error": " ".join(error.split()), "traceback": traceback.format_exc()}
    # the values a json file gives back
    return {"status": "ok", "metrics": json.loads(json.dumps(metrics, default=_json_default))}


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")


# ------------------------------------------------------------------------------------------ running


def finished_points(out_dir: str | Path) -> int:
    """The points of the sweep in ``out_dir`` that finished (a rerun of the same sweep skips them)."""
    return sum(1 for p in Path(out_dir, "points").glob("*.json") if (_read_point(p) or {}).get("status") == "ok")


def run_sweep(plan: SweepPlan, out_dir: str | Path, *, executor: Executor = "local", workers: int | None = None,
              ray_address: str | None = None, progress: bool = False, max_points: int | None = None,
              overwrite: bool = False) -> pd.DataFrame:  # fmt: skip
    """Run the points not already finished in ``out_dir/points``; return the table of all recorded points.

    ``out_dir`` must be new, empty, or hold this same sweep (resumed); one holding another sweep is cleared
    first only with ``overwrite``. ``max_points`` stops after that many new points (how tests stand in for an
    interrupted sweep). Raises InputError before writing anything when the folder or executor is unusable.
    """
    out = Path(out_dir)
    points_dir = out / "points"
    check_output_folder(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # where its claim is held
    except OSError as exc:
        raise InputError(f"--out: cannot create the sweep folder: {exc.strerror}", source=str(out)) from None
    with claim_folder(out, "--out"):  # one sweep a folder at a time: two would run and write the same points
        return _run_sweep(plan, out, points_dir, executor=executor, workers=workers, ray_address=ray_address,
                          progress=progress, max_points=max_points, overwrite=overwrite)


def _run_sweep(plan: SweepPlan, out: Path, points_dir: Path, *, executor: Executor, workers: int | None,
               ray_address: str | None, progress: bool, max_points: int | None, overwrite: bool) -> pd.DataFrame:
    from sim.base.progress import progress_bar

    _claim_folder(plan, out, overwrite)
    workers = workers or os.cpu_count() or 1
    ray_started = connect_ray(workers, ray_address) if executor == "ray" else False
    created = not out.exists()
    try:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--out: cannot create the sweep folder: {exc.strerror}", source=str(out)) from None
        write_text_atomic(out / "sweep.yaml", _describe_yaml(plan))
        done: dict[str, dict] = {}
        for p in plan.points:
            record = _read_point(points_dir / f"{p.point_id}.json")
            if record is not None:
                done[p.point_id] = record
        todo = [p for p in plan.points if done.get(p.point_id, {}).get("status") != "ok"]
        if max_points is not None:
            todo = todo[:max_points]
        bar = progress_bar(len(plan.points), initial=len(plan.points) - len(todo), unit="points", desc="sweep",
                           enabled=progress)  # fmt: skip
        _write_table(plan, done, out)
        run = _run_ray if executor == "ray" else _run_local
        try:
            for p, outcome in run(todo, workers):
                done[p.point_id] = {"point_id": p.point_id, "params": p.params, "seed": p.scenario.seed,
                                    "scenario": p.scenario.name, **outcome}  # fmt: skip
                write_text_atomic(
                    points_dir / f"{p.point_id}.json", json.dumps(done[p.point_id], indent=1) + "\n"
                )
                _write_table(plan, done, out)
                bar.update()
        finally:
            bar.close()
    except BaseException:
        if created and not any(points_dir.glob("*.json")):  # a folder this call made, with no point in it
            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        if ray_started:
            import ray

            ray.shutdown()
    return table(plan, done)


def _describe_yaml(plan: SweepPlan) -> str:
    return yaml.safe_dump(plan.describe(), sort_keys=False)


def _same_sweep(recorded: dict, plan: SweepPlan) -> bool:
    """Same base scenario, overrides and grid (where it was started from does not matter)."""
    new = plan.describe()
    return all(recorded.get("sweep", {}).get(k) == new["sweep"][k] for k in ("set", "grid", "points")) and (
        recorded.get("scenario") == new["scenario"]
    )


def _claim_folder(plan: SweepPlan, out: Path, overwrite: bool) -> None:
    """Refuse a folder that holds something else; with ``overwrite``, clear a previous sweep's files."""
    check_output_folder(out, "--out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    recorded = _read_sweep_file(out / "sweep.yaml")
    if recorded is not None and _same_sweep(recorded, plan):
        return  # resume
    if not overwrite:
        what = "another sweep" if recorded is not None else "other files"
        raise InputError(f"--out: holds {what}; rerun the same sweep to resume it, pass --overwrite to replace "
                         "it, or choose another folder", source=str(out))  # fmt: skip
    if recorded is None:
        raise InputError("--out: not a sweep folder (no sweep.yaml); refusing to replace it", source=str(out))
    import shutil

    shutil.rmtree(out / "points", ignore_errors=True)
    for name in ("sweep.parquet", "sweep.yaml"):
        (out / name).unlink(missing_ok=True)


def _read_point(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # absent, or not ours: run it again
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("metrics"), dict):
        return {**record, "status": "ok"}
    return record if record.get("status") == "failed" else None


def _run_local(todo: list[Point], workers: int) -> Iterator[tuple[Point, dict]]:
    yield from in_processes([(p, _run_point, (p.scenario,)) for p in todo], workers)


def _run_ray(todo: list[Point], workers: int) -> Iterator[tuple[Point, dict]]:
    import ray

    task = ray.remote(num_cpus=1)(_run_point)
    refs = {task.remote(p.scenario): p for p in todo}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                yield refs[ref], ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


# ------------------------------------------------------------------------------------------ output


def table(plan: SweepPlan, done: dict[str, dict]) -> pd.DataFrame:
    """One row per recorded point, in grid order: point_id, grid columns, seed, status ("ok" or "failed"),
    error (None when ok), flat metrics (missing for a failed point)."""
    rows = []
    for p in plan.points:
        record = done.get(p.point_id)
        if record is None:
            continue
        row = {"point_id": p.point_id, **p.params}
        row.setdefault("seed", p.scenario.seed)
        row.update(status=record["status"], error=record.get("error"))
        rows.append({**row, **record.get("metrics", {})})
    keys = [a.key for a in plan.axes]
    columns = ["point_id", *keys, *([] if "seed" in keys else ["seed"]), "status", "error"]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=columns)
    for key in keys:
        df[key] = _one_type(df[key])
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
