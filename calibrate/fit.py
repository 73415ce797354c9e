"""Least-squares fit of ``t = latency + n_items * per_item + bytes / bandwidth`` with non-negative terms.

Residuals are relative (each row divided by its measured time), so a 1-us shape weighs as much as a 10-ms one;
otherwise the largest transfers alone would set every parameter. Non-negativity is exact: with three unknowns
every subset of active terms is solved and the best feasible one kept (the bytes term is always active, so the
bandwidth stays finite).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from sim.model.costs import CostFit

__all__ = ["fit_cost"]


def fit_cost(n_items: Sequence[float], total_bytes: Sequence[float], seconds: Sequence[float]) -> CostFit:
    """Fit one (op, backend); raises ValueError with no usable point."""
    n = np.asarray(n_items, dtype=float)
    b = np.asarray(total_bytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    keep = t > 0
    n, b, t = n[keep], b[keep], t[keep]
    if not np.any(b > 0):
        raise ValueError("no point with positive time and bytes to fit")
    columns = np.stack([np.ones_like(t), n, b], axis=1) / t[:, None]
    target = np.ones_like(t)
    best: tuple[float, np.ndarray] | None = None
    for active in itertools.chain.from_iterable(itertools.combinations((0, 1), k) for k in range(3)):
        cols = [*active, 2]
        coef, *_ = np.linalg.lstsq(columns[:, cols], target, rcond=None)
        if np.any(coef < 0) or coef[-1] <= 0:
            continue
        full = np.zeros(3)
        full[cols] = coef
        residual = float(np.sum((columns @ full - target) ** 2))
        if best is None or residual < best[0]:
            best = (residual, full)
    if best is None:  # even the bytes term alone came out non-positive: fall back to the best observed rate
        return CostFit(latency_s=0.0, bandwidth_Bps=float(np.max(b[b > 0] / t[b > 0])))
    latency, per_item, inv_bw = best[1]
    return CostFit(latency_s=float(latency), bandwidth_Bps=float(1.0 / inv_bw), per_item_s=float(per_item))
