"""Figures over several seeds: a mean with its 95% interval, and whether two setups differ beyond the noise.

One seed is one sample of a run's randomness (arrival gaps, which client goes next, synthetic prompts); a
figure from one seed can be far from its mean (the multi-turn L1 + L2 gain is 1.18x-1.7x over seeds 1-4).
``run --seeds`` and ``sweep --seeds`` run every seed as its own point, in parallel processes, and report
each figure as mean and Student-t 95% interval over seeds. The seeds are a list, so the same list gives the
same rows, and two setups run over the same list are *paired*: seed s of A and seed s of B share arrivals
and client order (common random numbers), so their per-seed differences carry less noise than two
independent means. :func:`compare` uses the paired test when the seed lists match and Welch's otherwise;
against a single run, the other side's spread bounds where one more of its draws would fall (a prediction
interval, equal variances assumed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from sim.base.errors import InputError

__all__ = ["HEADLINE", "NO_SPREAD_NOTE", "Interval", "Difference", "aggregate", "compare", "different_workloads",
           "format_compare", "format_intervals", "interval", "no_spread", "parse_seeds", "t_quantile"]  # fmt: skip

# The headline figures every multi-seed table carries: (flat metric column, label, format of one value).
HEADLINE: tuple[tuple[str, str, str], ...] = (
    ("input_tokens_per_s", "input tok/s", "{:,.0f}"),
    ("output_tokens_per_s", "output tok/s", "{:,.0f}"),
    ("requests_per_s", "req/s", "{:,.2f}"),
    ("ttft_mean_s", "TTFT mean s", "{:.3f}"),
    ("ttft_p90_s", "TTFT p90 s", "{:.3f}"),
    ("tpot_mean_s", "TPOT mean s", "{:.4f}"),
    ("hit_device", "hit L1", "{:.2%}"),
    ("hit_host", "hit L2", "{:.2%}"),
    ("hit_storage", "hit L3", "{:.2%}"),
    ("hit_total", "hit total", "{:.2%}"),
    ("hisparse_peak_batch", "peak batch", "{:,.1f}"),  # a decode timeline's (HiSparse)
    ("hisparse_capacity_gain", "KV gain", "{:.2f}x"),  # a DSA model's (sim.hisparse.dsa)
    ("hisparse_break_even_batch", "pays from batch", "{:,.0f}"),
)

# t_{0.975, df} for df = 1..30 (two-sided 95%); beyond, a Cornish-Fisher expansion around the normal.
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788,
         2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639,
         2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)  # fmt: skip
_Z975 = 1.959963984540054


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (a 95% two-sided interval)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z, v = _Z975, float(df)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3))  # fmt: skip


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` per-seed values and its 95% Student-t interval; lo = hi = mean when n < 2 (no spread
    can be estimated from one seed: ``half`` is None then)."""

    mean: float
    lo: float
    hi: float
    half: float | None
    n: int
    sd: float | None

    def format(self, fmt: str = "{:.3g}") -> str:
        if self.half is None:
            return fmt.format(self.mean)
        return f"{fmt.format(self.mean)} ± {fmt.format(self.half)}"


def interval(values: Iterable[float]) -> Interval:
    a = np.asarray([float(v) for v in values], dtype=float)
    a = a[~np.isnan(a)]
    n = len(a)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, None, 0, None)
    mean = float(a.mean())
    if n < 2:
        return Interval(mean, mean, mean, None, n, None)
    sd = float(a.std(ddof=1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, half, n, sd)


MAX_SEEDS = 1000  # each seed is a whole run


def parse_seeds(text: str, base: int) -> list[int]:
    """``--seeds``: ``N`` (N seeds from the scenario's own, ``base .. base+N-1``) or a list ``1,2,7``, at most
    ``MAX_SEEDS`` of them, each within every input's bounds."""
    from sim.base.inputs import number_problem

    text = str(text).strip()
    try:
        numbers = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InputError(f"--seeds {text}: expected a count (5) or a list of seeds (1,2,7)") from None
    count = numbers[0] if "," not in text and len(numbers) == 1 else len(numbers)
    if count > MAX_SEEDS:
        raise InputError(f"--seeds {text}: at most {MAX_SEEDS:,} seeds (each is a whole run)")
    if "," not in text:
        if len(numbers) != 1 or numbers[0] < 1:
            raise InputError(f"--seeds {text}: a count must be >= 1")
        numbers = list(range(base, base + numbers[0]))
    if (problem := next(filter(None, map(number_problem, numbers)), None)) is not None:
        raise InputError(f"--seeds {text}: {problem}")
    seeds = numbers
    if not seeds:
        raise InputError(f"--seeds {text}: no seed given")
    if any(s < 0 for s in seeds):
        raise InputError(f"--seeds {text}: seeds must be >= 0")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seeds {text}: a seed is repeated")
    return seeds


def aggregate(df: pd.DataFrame, keys: Sequence[str] = (), metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows of a per-seed table grouped by ``keys`` (grid columns): for each metric, ``M_mean``, ``M_lo``,
    ``M_hi``, ``M_half``, and ``seeds`` (how many seeds the group holds). Failed rows are left out. ``M_lo`` is
    cut at 0: every figure here is a rate, a time or a share (``M_half`` stays the t interval's)."""
    if "status" in df:
        df = df[df["status"] == "ok"]
    metrics = [m for m, _, _ in HEADLINE] if metrics is None else list(metrics)
    metrics = [m for m in metrics if m in df]
    groups = df.groupby(list(keys), sort=False, dropna=False) if keys else [((), df)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        row["seeds"] = len(g)
        for m in metrics:
            iv = interval(g[m])
            row.update({f"{m}_mean": iv.mean, f"{m}_lo": max(iv.lo, 0.0), f"{m}_hi": iv.hi, f"{m}_half": iv.half})
        rows.append(row)
    return pd.DataFrame(rows)


def no_spread(df: pd.DataFrame, keys: Sequence[str] = ()) -> bool:
    """Whether the seeds gave identical figures (every headline figure of every group of two or more seeds):
    the workload draws nothing from the seed, so an interval of 0 says nothing about noise."""
    if "status" in df:
        df = df[df["status"] == "ok"]
    metrics = [m for m, _, _ in HEADLINE if m in df]
    groups = [g for _, g in df.groupby(list(keys), sort=False, dropna=False)] if keys else [df]
    seeded = [g for g in groups if len(g) >= 2]
    return bool(seeded) and all(g[m].nunique(dropna=False) == 1 for g in seeded for m in metrics)


NO_SPREAD_NOTE = ("every seed gave the same figures: nothing in this workload draws from the seed (a trace or "
                  "trajectory replays its own arrivals and prompts), so the ± 0 intervals are no measure of noise")


def format_intervals(df: pd.DataFrame, keys: Sequence[str] = ()) -> str:
    """The table ``run --seeds`` and ``sweep --seeds`` print: mean ± 95% half-width per headline figure."""
    agg = aggregate(df, keys)
    if agg.empty:
        return "(no finished seeds)"
    cols = [(m, h, f) for m, h, f in HEADLINE if f"{m}_mean" in agg]
    heads = [k.rsplit(".", 1)[-1] for k in keys] + ["seeds"] + [h for _, h, _ in cols]
    cells = []
    for r in agg.to_dict("records"):  # per column, so an integer grid value prints as one (iterrows: floats)
        row = [str(r[k]) for k in keys] + [str(int(r["seeds"]))]
        for m, _, f in cols:
            mean, half = r[f"{m}_mean"], r[f"{m}_half"]
            if half is None or pd.isna(half):
                row.append(f.format(mean))
            elif mean - half < 0:  # cut at 0 (aggregate)
                row.append(f"{f.format(mean)} [{f.format(0.0)}, {f.format(r[f'{m}_hi'])}]")
            else:
                row.append(f"{f.format(mean)} ± {f.format(half)}")
        cells.append(row)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines) + "\n(mean ± half-width of the 95% Student-t interval over seeds; [0, hi] where it is cut at 0)"


@dataclass(frozen=True)
class Difference:
    """B against A for one metric: means, the difference B - A with its 95% interval, the ratio of the means
    B / A with the difference's interval over A's mean (A's mean taken as exact; its lower end cut at 0, as
    every figure compared is a rate, a time or a share), the test used, and whether the interval of the
    difference excludes zero (so that of the ratio excludes 1)."""

    metric: str
    mean_a: float
    mean_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    ratio: float
    ratio_lo: float
    ratio_hi: float
    test: str  # "paired t", "Welch t", "t, B one seed" (A's spread), "one seed" (one run a side) or "no spread"
    # (every seed gave the same figure on both sides: a deterministic workload, no noise to test against)
    n_a: int
    n_b: int
    significant: bool

    def as_dict(self) -> dict:
        """Strict JSON: an undefined ratio (A's mean is 0) is null."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(self).items()}


def compare(a: pd.DataFrame, b: pd.DataFrame, metrics: Sequence[str] | None = None) -> list[Difference]:
    """Compare two per-seed tables (rows with ``seed`` and metric columns). Paired by seed when both hold
    the same seeds, else Welch's unequal-variance t interval; no test where every seed gave the same run on both
    sides (a deterministic workload: any difference is exact, and no noise measures it)."""
    metrics = [m for m, _, _ in HEADLINE] if metrics is None else list(metrics)
    a = a.sort_values("seed").reset_index(drop=True)
    b = b.sort_values("seed").reset_index(drop=True)
    paired = list(a["seed"]) == list(b["seed"])
    flat = no_spread(a) and no_spread(b)  # every seed the same run on both sides: no noise to test against
    out = []
    for m in metrics:
        if m not in a or m not in b:
            continue
        x, y = a[m].to_numpy(float), b[m].to_numpy(float)
        ma, mb = float(x.mean()), float(y.mean())
        if flat:
            lo = hi = mb - ma
            test = "no spread"
        elif paired and len(x) >= 2:
            d = interval(y - x)  # centred on mb - ma
            lo, hi, test = d.lo, d.hi, "paired t"
        else:
            half, test = _unpaired_half(x, y)
            lo, hi = mb - ma - half, mb - ma + half
        ratio, rlo, rhi = (mb / ma, max(0.0, 1 + lo / ma), 1 + hi / ma) if ma else (math.nan,) * 3
        significant = test not in ("one seed", "no spread") and (lo > 0 or hi < 0)
        out.append(Difference(m, ma, mb, mb - ma, lo, hi, ratio, rlo, rhi, test, len(x), len(y), significant))
    return out


def _unpaired_half(x: np.ndarray, y: np.ndarray) -> tuple[float, str]:
    """The half-width of B - A's 95% interval for unpaired seeds, and the test: Welch's with spread on both sides;
    with one seed on one side, the other side's spread for one more draw; none with one seed on each."""
    if len(x) >= 2 and len(y) >= 2:
        va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
        dof = (va + vb) ** 2 / ((va**2 / (len(x) - 1) if va else 0) + (vb**2 / (len(y) - 1) if vb else 0) or 1)
        return t_quantile(max(1, int(dof))) * math.sqrt(va + vb), "Welch t"  # floor of the df: a little wider
    if max(len(x), len(y)) >= 2:
        many = x if len(x) >= 2 else y
        half = t_quantile(len(many) - 1) * float(many.std(ddof=1)) * math.sqrt(1 / len(many) + 1)
        return half, f"t, {'B' if len(y) < 2 else 'A'} one seed"
    return 0.0, "one seed"


def format_compare(diffs: Sequence[Difference], name_a: str = "A", name_b: str = "B") -> str:
    """One line per metric: A, B, B - A with its interval, B / A, and the verdict."""
    fmts = {m: f for m, _, f in HEADLINE}
    labels = {m: h for m, h, _ in HEADLINE}
    heads = ["metric", name_a, name_b, "B - A [95% interval]", "B / A [95% interval]", "verdict"]
    cells = []
    for d in diffs:
        f = fmts.get(d.metric, "{:.4g}")
        verdict = ("no spread (one seed)" if d.test == "one seed" else
                   "no noise to test (every seed the same run)" if d.test == "no spread" else
                   ("outside the noise" if d.significant else "within the noise") + f" ({d.test})")  # fmt: skip
        cells.append([labels.get(d.metric, d.metric), f.format(d.mean_a), f.format(d.mean_b),
                      f"{f.format(d.diff)} [{f.format(d.diff_lo)}, {f.format(d.diff_hi)}]",
                      "-" if math.isnan(d.ratio) else f"{d.ratio:.3f}x [{d.ratio_lo:.3f}, {d.ratio_hi:.3f}]",
                      verdict])  # fmt: skip
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) if i in (0, 5) else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths)))]
    lines += ["  ".join(c.ljust(w) if i in (0, 5) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in cells]  # fmt: skip
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ running


def with_seed(sc, seed: int):
    """The scenario at another seed (validated scenarios are immutable)."""
    return sc.model_copy(update={"seed": seed})


def run_seeds(sc, seeds: Sequence[int], *, workers: int | None = None, progress: bool = False) -> pd.DataFrame:
    """Run ``sc`` once per seed, in parallel processes; one row per seed (sorted), ``seed`` then the sweep's
    flat metrics and TPOT (a decode instance: throughput, TPOT and HiSparse's figures). A seed that fails
    raises InputError naming it (its rows would bias the interval)."""
    from sim.app.parallel import run_calls
    from sim.app.plan.tasks import timed_run

    outcomes = run_calls([(timed_run, (with_seed(sc, s),)) for s in seeds], workers=workers, progress=progress,
                         desc=f"{sc.name} x {len(seeds)} seeds")  # fmt: skip
    rows = []
    for seed, outcome in zip(seeds, outcomes):
        if outcome["status"] != "ok":
            raise InputError(f"seed {seed}: {outcome['error']}")
        rows.append({"seed": seed, **outcome["value"]})
    return pd.DataFrame(rows).sort_values("seed").reset_index(drop=True)


def seeds_summary(sc, df: pd.DataFrame) -> dict:
    """What ``run --seeds`` writes as ``summary.json``: every headline figure's interval and the per-seed
    rows (so ``hicache-sim diff`` can pair two runs by seed)."""
    figures = {m: asdict(interval(df[m])) for m, _, _ in HEADLINE if m in df}
    return {"kind": "seeds", "scenario": sc.name, "seeds": [int(s) for s in df["seed"]], "confidence": 0.95,
            "figures": figures, "per_seed": df.to_dict(orient="records")}  # fmt: skip


def different_workloads(a, b) -> list[str] | None:
    """The workload fields two run folders differ in (their ``scenario.yaml``: a run's and ``run --seeds``'), or
    None where either has none to read; their difference is then the workload's as much as the setup's."""
    from pathlib import Path

    from sim.base.inputs import parse_yaml, read_text

    loads = []
    for folder in (a, b):
        path = Path(folder) if Path(folder).is_dir() else Path(folder).parent
        try:
            doc = parse_yaml(read_text(path / "scenario.yaml", "scenario"), str(path / "scenario.yaml"))
        except InputError:
            return None
        loads.append(doc.get("workload") if isinstance(doc, dict) else None)
    wa, wb = loads
    if not (isinstance(wa, dict) and isinstance(wb, dict)):
        return None
    return sorted(k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k))


def read_seed_table(folder) -> pd.DataFrame:
    """The per-seed table of a run folder: a ``run --seeds`` folder (many rows) or a plain run (one row)."""
    import json

    from sim.app.sweep import flat_metrics
    from sim.base.inputs import check_input, read_text

    path = check_input(folder, "run folder or its summary.json", folder=True)
    path = path / "summary.json" if path.is_dir() else path
    try:
        data = json.loads(read_text(path, "run's summary.json"))
    except ValueError:
        raise InputError("not a JSON summary", source=str(path)) from None
    try:
        if isinstance(data, dict) and data.get("kind") == "seeds":
            return pd.DataFrame(data["per_seed"])
        if isinstance(data, dict) and data.get("role") in ("decode", "colocated") and "hisparse" in data:
            from sim.app.plan.tasks import decode_row

            return pd.DataFrame([{"seed": data.get("seed", 0), **decode_row(data)}])
        if isinstance(data, dict) and "throughput" in data and "hit_rate" in data:
            return pd.DataFrame([{"seed": data.get("seed", 0), **flat_metrics(data)}])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a summary edited or cut short by hand
        raise InputError(f"a damaged run summary ({type(exc).__name__}: {exc})", source=str(path)) from None
    raise InputError("not a hicache-sim run summary (no throughput, no per-seed rows)", source=str(path))
