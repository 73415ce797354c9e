"""Run a list of scenarios in local worker processes with one progress bar (total and ETA).

The worker body and the exit-with-parent guard are the sweep's (:mod:`sim.sweep`), so a point that fails
is an outcome, not the end of the batch, and workers die with the command.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from sim.scenario import Scenario

__all__ = ["run_scenarios"]


def run_scenarios(scenarios: Sequence[Scenario], *, workers: int | None = None, progress: bool = False,
                  desc: str = "runs", bar=None) -> list[dict]:  # fmt: skip
    """The outcome of each scenario, in input order: ``{"status": "ok", "metrics": flat metrics}`` or
    ``{"status": "failed", "error": ...}``. ``bar``: an open tqdm bar to advance instead of a new one."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from sim.sweep import _exit_with_parent, _run_point

    workers = max(1, min(workers or os.cpu_count() or 1, len(scenarios)))
    own = bar is None
    bar = bar if bar is not None else tqdm(total=len(scenarios), desc=desc, unit="run", disable=not progress,
                                           file=sys.stderr)  # fmt: skip
    out: list[dict | None] = [None] * len(scenarios)
    try:
        if workers == 1:
            for i, sc in enumerate(scenarios):
                out[i] = _run_point(sc)
                bar.update()
            return out  # type: ignore[return-value]
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_exit_with_parent)
        finished = False
        try:
            futures = {pool.submit(_run_point, sc): i for i, sc in enumerate(scenarios)}
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                bar.update()
            finished = True
        finally:
            if not finished:
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.terminate()
            pool.shutdown(wait=finished, cancel_futures=True)
    finally:
        if own:
            bar.close()
    return out  # type: ignore[return-value]
