"""Fit the step-time model (``sim.model.compute.Roofline``) to measured SGLang runs: ``hicache-sim calibrate compute``.

Inputs are what a user already has:

- SGLang ``bench_serving`` result files written with ``--output-file F --output-details`` (one JSON object per
  run: ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, optionally ``cached_tokens``, and
  ``max_concurrency``). A run at concurrency 1 gives, per request, one prefill point (TTFT: the uncached
  tokens after the cached ones) and one decode point (mean ITL at batch 1). At higher concurrency TTFT holds
  queueing, so only the decode point is taken, at batch = the concurrency.
- A CSV of measured points: ``kind,tokens,context,batch,seconds[,label]`` where a ``prefill`` row is one
  request's TTFT for ``tokens`` new tokens after ``context`` cached ones, and a ``decode`` row one decode
  step's time over ``batch`` requests holding ``context`` tokens in all.

The model is linear in (overhead, 1/mfu, attn_flops_scale/mfu, 1/mbu) once the scenario fixes the FLOPs and
bytes (model config, GPU, TP): a prefill of ``n`` tokens in ``ceil(n / chunk)`` steps takes ``steps x
overhead + (n F + pairs A s) / (P mfu)``, a decode step ``overhead + bytes(batch, context) / (H mbu)``. The fit
minimises relative error with every term non-negative (each subset of active terms is solved, the best
feasible kept), reports each point's error, and writes the parameters into a cost table's ``compute`` section.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.base.errors import InputError
from sim.base.inputs import check_input, number_problem, parse_json, read_text
from sim.model.compute import Roofline, attention_pairs

__all__ = ["FitResult", "Point", "fit_compute", "format_fit", "read_points"]

PARAMS = ("step_overhead_ms", "mfu", "attn_flops_scale", "mbu")


@dataclass(frozen=True)
class Point:
    kind: str  # "prefill" or "decode"
    tokens: int  # prefill: new tokens; decode: unused (0)
    context: int  # prefill: cached tokens before them; decode: tokens held by the whole batch
    batch: int
    seconds: float
    label: str = ""


@dataclass(frozen=True)
class FitResult:
    params: dict[str, float]
    points: list[Point]
    predicted: list[float]
    free: int = 0  # parameters the points determined (the others pinned by --fix or by missing kinds of points)

    @property
    def errors(self) -> list[float]:
        return [p / pt.seconds - 1 for pt, p in zip(self.points, self.predicted)]

    @property
    def rms_error(self) -> float:
        return float(math.sqrt(np.mean(np.square(self.errors)))) if self.points else 0.0


def _csv_points(path: Path) -> list[Point]:
    out = []
    text = read_text(path, "CSV of measured points")
    for lineno, row in enumerate(csv.DictReader(io.StringIO(text)), 2):
        try:
            kind = (row["kind"] or "").strip()
            if kind not in ("prefill", "decode"):
                raise ValueError(f"kind must be prefill or decode, got {kind!r}")
            p = Point(kind, _count(row.get("tokens") or 0, "tokens"), _count(row.get("context") or 0, "context"),
                      _count(row.get("batch") or 1, "batch"), _seconds(row["seconds"], "seconds"),
                      (row.get("label") or "").strip())  # fmt: skip
        except KeyError as exc:
            raise InputError(f"missing column {exc.args[0]!r}", source=str(path), line=lineno) from None
        except (TypeError, ValueError) as exc:
            raise InputError(str(exc), source=str(path), line=lineno) from None
        if p.seconds <= 0 or p.batch <= 0 or p.tokens < 0 or p.context < 0 or (kind == "prefill" and not p.tokens):
            raise InputError("seconds and batch must be > 0, a prefill needs tokens", source=str(path), line=lineno)
        out.append(p)
    return out


def _count(value, name: str) -> int:
    """A token or request count: a non-negative integer within the bounds of any input."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(f"{name}: expected an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
    if (problem := number_problem(value)) is not None:
        raise ValueError(f"{name}: {problem}")
    return value


def _seconds(value, name: str) -> float:
    """A measured time: a finite, non-negative number of seconds (below a microsecond is allowed)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"{name}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValueError(f"{name}: expected a non-negative number, got {value!r}")
    if (problem := number_problem(value, floor=False)) is not None:
        raise ValueError(f"{name}: {problem}")
    return float(value)


def _list(run: dict, name: str, item, n: int | None = None) -> list:
    value = run[name]
    if not isinstance(value, list) or (n is not None and len(value) != n):
        raise ValueError(f"{name}: expected a list{f' of {n} values (one per request)' if n is not None else ''}")
    return [item(v, name) for v in value]


def _itl(value, name: str) -> list[float]:
    if not isinstance(value, list):
        raise ValueError(f"{name}: expected one list of inter-token latencies per request")
    return [_seconds(v, name) for v in value]


def _bench_points(path: Path) -> list[Point]:
    out = []
    for lineno, line in enumerate(read_text(path, "bench_serving result file").splitlines(), 1):
        if not line.strip():
            continue
        run = parse_json(line, str(path), line=lineno, what="JSON")
        if not isinstance(run, dict):
            raise InputError("expected a JSON object (one bench_serving run)", source=str(path), line=lineno)
        try:
            ins = _list(run, "input_lens", _count)
            outs, ttfts = _list(run, "output_lens", _count, len(ins)), _list(run, "ttfts", _seconds, len(ins))
            itls = _list(run, "itls", _itl, len(ins))
            cached = _list(run, "cached_tokens", _count, len(ins)) if run.get("cached_tokens") else [0] * len(ins)
            conc = _count(run.get("max_concurrency") or 1, "max_concurrency")
        except KeyError as exc:
            raise InputError(f"missing {exc} (write results with --output-details)", source=str(path), line=lineno) from None
        except ValueError as exc:
            raise InputError(str(exc), source=str(path), line=lineno) from None
        for i, (n, m, ttft, itl) in enumerate(zip(ins, outs, ttfts, itls)):
            label = f"line {lineno} #{i}"
            if conc == 1 and ttft > 0 and n > cached[i]:
                out.append(Point("prefill", int(n - cached[i]), int(cached[i]), 1, float(ttft), label))
            if itl and np.mean(itl) > 0:
                batch = max(1, min(conc, len(ins)))
                out.append(Point("decode", 0, int(batch * (n + m / 2)), batch, float(np.mean(itl)), label))
    return out


def read_points(paths: list[str]) -> list[Point]:
    """Measured points from bench_serving result files (``.jsonl``/``.json``) and point tables (``.csv``)."""
    points = []
    for name in paths:
        path = check_input(name, "measured-points file")
        points += _csv_points(path) if path.suffix == ".csv" else _bench_points(path)
    if not points:
        raise InputError(f"no usable measured points in {', '.join(paths)}")
    return points


def _columns(base: Roofline, p: Point, chunk: int) -> list[float]:
    """The point's coefficients on (overhead s, 1/mfu, attn_scale/mfu, 1/mbu)."""
    if p.kind == "prefill":
        steps = math.ceil(p.tokens / chunk)
        pairs = attention_pairs(p.tokens, p.context)
        return [steps, p.tokens * base.flops_per_token / base.peak_flops,
                pairs * base.attn_flops_per_pair / base.peak_flops, 0.0]  # fmt: skip
    return [1.0, 0.0, 0.0, base.decode_bytes(p.batch, p.context) / base.hbm_Bps]


def fit_compute(points: list[Point], base: Roofline, chunk: int, *, fixed: dict[str, float] | None = None) -> FitResult:
    """Fit :data:`PARAMS` to ``points`` with the FLOPs and bytes of ``base``; ``fixed`` pins some of them."""
    fixed = dict(fixed or {})
    unknown = set(fixed) - set(PARAMS)
    if unknown:
        raise InputError(f"--fix: unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMS)})")
    if not any(p.kind == "prefill" for p in points) and "mfu" not in fixed:
        fixed.setdefault("mfu", base.mfu)
    if not any(p.kind == "decode" for p in points) and "mbu" not in fixed:
        fixed.setdefault("mbu", base.mbu)
    if sum(p.kind == "prefill" and p.context + p.tokens > 1 for p in points) < 2:
        fixed.setdefault("attn_flops_scale", base.attn_scale)
    t = np.array([p.seconds for p in points])
    cols = np.array([_columns(base, p, chunk) for p in points])
    # Move pinned parameters to the known side: x = (o, 1/mfu, s/mfu, 1/mbu).
    target = t.copy()
    free = [0, 1, 2, 3]
    if "step_overhead_ms" in fixed:
        target -= cols[:, 0] * fixed["step_overhead_ms"] / 1e3
        free.remove(0)
    if "mfu" in fixed and "attn_flops_scale" in fixed:
        target -= (cols[:, 1] + cols[:, 2] * fixed["attn_flops_scale"]) / fixed["mfu"]
        free.remove(1)
        free.remove(2)
    elif "attn_flops_scale" in fixed:  # one unknown 1/mfu over both prefill terms
        cols[:, 1] += cols[:, 2] * fixed["attn_flops_scale"]
        free.remove(2)
    elif "mfu" in fixed:
        target -= cols[:, 1] / fixed["mfu"]
        free.remove(1)
    if "mbu" in fixed:
        target -= cols[:, 3] / fixed["mbu"]
        free.remove(3)
    a, b = cols[:, free] / t[:, None], target / t
    best = None
    for k in range(len(free) + 1):
        for active in itertools.combinations(range(len(free)), k):
            x = np.zeros(len(free))
            if active:
                sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
                if np.any(sol < 0):
                    continue
                x[list(active)] = sol
            res = float(np.sum((a @ x - b) ** 2))
            if best is None or res < best[0] - 1e-15:
                best = (res, x)
    x_full = dict(zip(free, best[1]))
    params = dict(fixed)
    if 0 in x_full:
        params["step_overhead_ms"] = x_full[0] * 1e3
    inv_mfu = x_full.get(1)
    if inv_mfu is not None:
        if not inv_mfu > 0:
            raise InputError("the prefill points fit no positive mfu (are the FLOPs of the scenario's model right?)")
        params["mfu"] = 1.0 / inv_mfu
    if 2 in x_full:
        params["attn_flops_scale"] = x_full[2] * params.get("mfu", 1.0)
    if 3 in x_full:
        if not x_full[3] > 0:
            raise InputError("the decode points fit no positive mbu")
        params["mbu"] = 1.0 / x_full[3]
    for k in ("mfu", "mbu"):
        params[k] = min(params[k], 1.0)
    params = {k: float(params[k]) for k in PARAMS}
    from sim.scenario.load import ComputeConfig, field_problem

    for k, v in params.items():  # a fit is held to the bounds a scenario's compute.K has
        if k not in fixed and (problem := field_problem(ComputeConfig, k, v)) is not None:
            raise InputError(f"the measured points fit {k} = {v:.3g}, which compute.{k} refuses ({problem}); "
                             f"give points that vary what {k} scales, or pin it with --fix {k}=VALUE")  # fmt: skip
    coef = np.array([params["step_overhead_ms"] / 1e3, 1 / params["mfu"], params["attn_flops_scale"] / params["mfu"],
                     1 / params["mbu"]])  # fmt: skip
    predicted = [float(c) for c in np.array([_columns(base, p, chunk) for p in points]) @ coef]
    return FitResult(params, points, predicted, free=len(free))


def fit_quality(result: FitResult) -> str:
    """The rms error, or why it says nothing: a fit with no more points than free parameters passes through
    every point (or could), so its error is 0 by construction and tests nothing."""
    n, k = len(result.points), result.free
    if n > k:
        return f"rms error {result.rms_error:.1%} over {n} points ({k} free parameters)"
    how = "exactly determined" if n == k else "under-determined"
    return (f"{how}: {n} points for {k} free parameters, so the error at the points ({result.rms_error:.1%}) "
            "is no test of the fit; add points to check it")


def format_fit(result: FitResult) -> str:
    p = result.params
    lines = [f"fitted: mfu {p['mfu']:.3f}, mbu {p['mbu']:.3f}, step overhead {p['step_overhead_ms']:.2f} ms, "
             f"attention FLOPs x{p['attn_flops_scale']:.3f}; {fit_quality(result)}",
             f"  {'kind':<8}{'tokens':>8}{'context':>10}{'batch':>6}{'measured ms':>13}{'fitted ms':>11}{'error':>8}  label"]  # fmt: skip
    for pt, pred, err in zip(result.points, result.predicted, result.errors):
        lines.append(f"  {pt.kind:<8}{pt.tokens:>8}{pt.context:>10}{pt.batch:>6}{pt.seconds * 1e3:>13.2f}"
                     f"{pred * 1e3:>11.2f}{err:>+8.1%}  {pt.label}")  # fmt: skip
    return "\n".join(lines)
