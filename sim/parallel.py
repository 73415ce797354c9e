"""Run independent calls in local worker processes with one progress bar (total and ETA).

Workers die with the command (an exit-with-parent guard), and an interrupted batch stops its running
calls at once. In :func:`run_calls` a call that raises is an outcome (``{"status": "failed", "error": ...}``),
not the end of the batch; ``sweep`` runs its points through :func:`in_processes` too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

__all__ = ["in_processes", "run_calls"]

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
    from tqdm import tqdm

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
        else:
            jobs = [(i, _outcome, (fn, args)) for i, (fn, args) in enumerate(calls)]
            for i, result in in_processes(jobs, workers):
                out[i] = result
                bar.update()
    finally:
        if own:
            bar.close()
    return out


def in_processes(jobs: Sequence[tuple[Hashable, Callable[..., Any], tuple]], workers: int
                 ) -> Iterator[tuple[Hashable, Any]]:  # fmt: skip
    """``(key, fn(*args))`` for each job, as they complete, in up to ``workers`` local processes."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if not jobs:
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), initializer=_exit_with_parent)
    finished = False
    try:
        futures = {pool.submit(fn, *args): key for key, fn, args in jobs}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()
        finished = True
    finally:
        if not finished:  # interrupted: stop the running calls now rather than wait for them
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
        pool.shutdown(wait=finished, cancel_futures=True)


def _exit_with_parent() -> None:
    """Worker initializer: die when the command's process does (killed, or `timeout` around it), not minutes
    later. Linux delivers SIGKILL on the parent's death (prctl PR_SET_PDEATHSIG); elsewhere a thread
    watches for the worker being re-parented."""
    import signal
    import threading
    import time

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the command's handler, inherited through fork
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


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
