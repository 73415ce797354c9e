"""Run independent calls in local worker processes with one progress bar (total and ETA).

Workers die with the command (an exit-with-parent guard), and an interrupted batch stops its running
calls at once. In :func:`run_calls` a call that raises is an outcome (``{"status": "failed", "error": ...}``),
not the end of the batch; ``sweep`` runs its points through :func:`in_processes` too.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from sim.base.errors import InputError

__all__ = ["check_reachable", "connect_ray", "in_processes", "run_calls"]

Call = tuple[Callable[..., Any], tuple]


def _outcome(fn: Callable[..., Any], args: tuple) -> dict:
    from sim.base.errors import InputError

    try:
        return {"status": "ok", "value": fn(*args)}
    except Exception as exc:  # one failed point is data for its row
        error = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        return {"status": "failed", "error": " ".join(error.split())}


def run_calls(calls: Sequence[Call], *, workers: int | None = None, progress: bool = False, desc: str = "runs",
              bar=None, executor: str = "local", ray_address: str | None = None) -> list[dict]:  # fmt: skip
    """The outcome of each call, in input order. ``bar``: an open progress bar to advance instead of a new one.
    ``executor="ray"``: Ray tasks (started here, or joined at ``ray_address``), as ``sweep --executor ray``."""
    from sim.base.progress import progress_bar

    workers = max(1, min(workers or os.cpu_count() or 1, len(calls)))
    own = bar is None
    if own:
        bar = progress_bar(len(calls), desc=desc, unit="runs", enabled=progress)
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
    started = connect_ray(workers, address)
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


def connect_ray(workers: int, address: str | None) -> bool:
    """Start or join Ray now, before the sweep writes anything; True if this call started it."""
    if address and address != "auto":
        check_reachable(address)
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray (pip install 'hicache-sim[ray]')") from None
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--ray-address {address}: cannot start or join Ray: {first}") from None
    return True


def check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, in one line, when nothing answers at ``[ray://]host:port`` (Ray itself retries
    for a minute, then raises)."""
    import socket

    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--ray-address {address}: expected host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise InputError(f"--ray-address {address}: cannot connect ({reason})") from None
