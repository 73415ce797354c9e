"""Run independent calls in local worker processes with one progress bar (total and ETA).

The exit-with-parent guard is the sweep's (:mod:`sim.sweep`), so workers die with the command. A call that
raises is an outcome (``{"status": "failed", "error": ...}``), not the end of the batch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["run_calls"]

Call = tuple[Callable[..., Any], tuple]


def _outcome(fn: Callable[..., Any], args: tuple) -> dict:
    from sim.errors import InputError

    try:
        return {"status": "ok", "value": fn(*args)}
    except Exception as exc:  # one failed point is data for its row
        error = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "error": " ".join(error.split())}


def run_calls(calls: Sequence[Call], *, workers: int | None = None, progress: bool = False, desc: str = "runs",
              bar=None, executor: str = "local", ray_address: str | None = None) -> list[dict]:  # fmt: skip
    """The outcome of each call, in input order. ``bar``: an open tqdm bar to advance instead of a new one.
    ``executor="ray"``: Ray tasks (started here, or joined at ``ray_address``), as ``sweep --executor ray``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from sim.sweep import _exit_with_parent

    workers = max(1, min(workers or os.cpu_count() or 1, len(calls)))
    own = bar is None
    if own:
        bar = tqdm(total=len(calls), desc=desc, unit="run", disable=not progress, file=sys.stderr)
    out: list[dict] = [{}] * len(calls)
    try:
        if executor == "ray":
            _run_ray(calls, workers, ray_address, out, bar)
        elif workers == 1:
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


def _run_ray(calls: Sequence[Call], workers: int, address: str | None, out: list[dict], bar) -> None:
    from sim.sweep import _connect_ray

    started = _connect_ray(workers, address)
    import ray

    try:
        task = ray.remote(num_cpus=1)(_outcome)
        refs = {task.remote(fn, args): i for i, (fn, args) in enumerate(calls)}
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    out[refs[ref]] = ray.get(ref)
                    bar.update()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()
