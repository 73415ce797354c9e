"""Run independent calls in local worker processes with one progress bar (total and ETA).

The exit-with-parent guard is the sweep's (:mod:`sim.sweep`), so workers die with the command. A call that
raises is an outcome (``{"status": "failed", "error": ...}``), not the end of the batch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from sim.scenario import Scenario

__all__ = ["run_calls", "run_scenarios"]

Call = tuple[Callable[..., Any], tuple]


def _outcome(fn: Callable[..., Any], args: tuple) -> dict:
    from sim.errors import InputError

    try:
        return {"status": "ok", "value": fn(*args)}
    except Exception as exc:  # one failed point is data for its row
        error = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "error": " ".join(error.split())}


def run_calls(calls: Sequence[Call], *, workers: int | None = None, progress: bool = False, desc: str = "runs",
              bar=None) -> list[dict]:  # fmt: skip
    """The outcome of each call, in input order. ``bar``: an open tqdm bar to advance instead of a new one."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from sim.sweep import _exit_with_parent

    workers = max(1, min(workers or os.cpu_count() or 1, len(calls)))
    own = bar is None
    if own:
        bar = tqdm(total=len(calls), desc=desc, unit="run", disable=not progress, file=sys.stderr)
    out: list[dict] = [{}] * len(calls)
    try:
        if workers == 1:
            for i, (fn, args) in enumerate(calls):
                out[i] = _outcome(fn, args)
                bar.update()
            return out
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_exit_with_parent)
        finished = False
        try:
            futures = {pool.submit(_outcome, fn, args): i for i, (fn, args) in enumerate(calls)}
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                bar.update()
            finished = True
        finally:
            if not finished:  # interrupted: stop the running calls now rather than wait for them
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.terminate()
            pool.shutdown(wait=finished, cancel_futures=True)
    finally:
        if own:
            bar.close()
    return out


def run_scenarios(scenarios: Sequence[Scenario], *, workers: int | None = None, progress: bool = False,
                  desc: str = "runs") -> list[dict]:  # fmt: skip
    """Each scenario's sweep row: ``{"status": "ok", "metrics": ...}`` or ``{"status": "failed", "error": ...}``."""
    outcomes = run_calls([(_row, (sc,)) for sc in scenarios], workers=workers, progress=progress, desc=desc)
    return [{"status": "ok", "metrics": o["value"]} if o["status"] == "ok" else o for o in outcomes]


def _row(sc: Scenario) -> dict:
    import json

    from sim.run import run_scenario
    from sim.sweep import _json_default, flat_metrics

    return json.loads(json.dumps(flat_metrics(run_scenario(sc, keep_requests=False).summary), default=_json_default))
