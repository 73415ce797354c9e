"""What a timed run records, and how it is summarised.

The engine hands plain tuples over on its hot path (per-request records, link busy intervals, periodic
samples); DataFrames and percentiles are built once, at the end. Per-request records are held column by
column (8 B a value, where a held tuple of boxed values costs ~800 B a record) and go to a sink in batches
(``requests.parquet`` written as the run goes) or stay in memory for library callers; the summary reads only
running totals and the per-request latencies, so memory does not grow by ~4 KB a request.
Counter names follow SGLang's
Prometheus metrics (``observability/metrics_collector.py``; ``shared/reference/sglang_hicache.md`` s7).
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LINKS", "MAX_TIMESERIES_ROWS", "REQUEST_COLUMNS", "Intervals", "Recorder", "RequestWriter",
           "SampleBuffer", "busy_fraction", "dropped_by_reason"]

LINKS = ("h2d", "d2h", "l3_read", "l3_write")
REQUEST_COLUMNS = (
    "rid", "instance", "session", "round", "arrival_s", "admitted_s", "first_token_s", "finish_s",
    "input_tokens", "output_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens",
    "computed_tokens", "load_back_s", "queue_wait_s", "ttft_s", "e2e_s",
    "retractions", "reprocessed_computed_tokens", "reprocessed_cached_tokens",
)  # fmt: skip
# A record's invariants (tests/sim/app/test_records.py): arrival <= admitted <= first token <= finish; the hits
# and ``computed_tokens`` are the first admission's and add up to ``input_tokens`` (a decode instance's are 0:
# its prompts were prefilled elsewhere); a retracted request's re-prefills (its prompt and the outputs it had
# made, again) are in the ``reprocessed_*`` columns only.
SUMMED = ("input_tokens", "output_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens",
          "computed_tokens", "retractions", "reprocessed_computed_tokens", "reprocessed_cached_tokens")  # fmt: skip
_INT_COLUMNS = {"rid", "instance", "session", "round", *SUMMED}
_TYPECODES = tuple("q" if c in _INT_COLUMNS else "d" for c in REQUEST_COLUMNS)  # array's int64 and float64
_SUMMED_AT = tuple(REQUEST_COLUMNS.index(c) for c in SUMMED)
BATCH_ROWS = 65_536  # per-request records held before a sink takes them
MAX_TIMESERIES_ROWS = 50_000  # ~2.5 KB a row while running (a dict of ~20 columns)


@mypyc_attr(native_class=False)  # a tuple subclass (a compiled class cannot be one)
class _Row(tuple):
    """A sample row stored as its values: the buffer's column names are held once, not in every row."""

    __slots__ = ()


@mypyc_attr(native_class=False)  # a list subclass (a compiled class cannot be one)
class SampleBuffer(list):
    """The periodic samples, bounded: past ``max_rows`` it keeps every other sampling tick, as if sampled
    at twice the interval (``stride`` says by how much the interval grew). A tick is ``rows_per_tick``
    consecutive appends (one row per instance); tick k (1-based) is kept when k is a multiple of ``stride``.
    Rows that are dicts with the first row's keys are held as their values (~0.3 KB a row, not ~1.2 KB;
    a long lane run samples every rank every second) and read back as dicts."""

    def __init__(self, rows_per_tick: int = 1, max_rows: int = MAX_TIMESERIES_ROWS) -> None:
        super().__init__()
        self.rows_per_tick, self.max_rows = rows_per_tick, max(max_rows, 2 * rows_per_tick)
        self.stride = 1
        self._appended = 0
        self._columns: tuple | None = None

    def wants_tick(self) -> bool:
        """Whether the next tick's rows are kept; if not, the tick is counted as taken, so a sampler builds
        no row the buffer would drop."""
        if self._appended % self.rows_per_tick or (self._appended // self.rows_per_tick + 1) % self.stride == 0:
            return True
        self._appended += self.rows_per_tick
        return False

    def append(self, row: object) -> None:
        tick = self._appended // self.rows_per_tick + 1
        self._appended += 1
        if tick % self.stride == 0:
            if isinstance(row, dict):
                keys = tuple(row)
                if self._columns is None:
                    self._columns = keys
                if keys == self._columns:
                    row = _Row(row.values())
            super().append(row)
            if len(self) > self.max_rows and self._appended % self.rows_per_tick == 0:
                self._thin()

    def __iter__(self) -> Iterator:
        cols = self._columns
        for row in super().__iter__():
            yield dict(zip(cols, row)) if isinstance(row, _Row) and cols is not None else row

    def _thin(self) -> None:
        """Keep the stored ticks at multiples of 2 x stride: the 2nd, 4th... stored group."""
        n = self.rows_per_tick
        kept = [row for j in range(1, len(self) // n, 2) for row in self[j * n : (j + 1) * n]]
        self[:] = kept
        self.stride *= 2


class Intervals:
    """A link's busy intervals, (start, end, bytes) in order, packed: a run has about one per request, and
    24 B each keeps a long run's memory flat where a tuple would cost ~150 B."""

    __slots__ = ("starts", "ends", "nbytes")

    def __init__(self) -> None:
        self.starts, self.ends, self.nbytes = array("d"), array("d"), array("q")

    def add(self, start: float, end: float, nbytes: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.nbytes.append(nbytes)

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self) -> Iterator[tuple[float, float, int]]:
        return zip(self.starts, self.ends, self.nbytes)


ENGINE_COUNTERS = (
    "prefetched_tokens_total", "backuped_tokens_total", "storage_prefetch_hit_tokens_total",
    "sim_prefetches_total", "sim_prefetch_requested_tokens_total", "sim_prefetch_retries_total",
    "sim_prefetch_rate_limited_total", "sim_write_back_wait_seconds_total",
    "num_retracted_requests_total", "num_retracted_input_tokens_total", "num_retracted_output_tokens_total",
)  # fmt: skip
UNFULFILLED_REASONS = ("below_threshold", "host_capacity", "storage_transfer", "deadline")


@dataclass
class Recorder:
    """Everything one run records. ``links[(instance, link)]`` holds (start, end, bytes) intervals.

    Per-request records are held in ``columns`` (one array a column of ``REQUEST_COLUMNS``). With a
    ``sink``, or with ``record_requests`` off, they are folded into the totals and handed to the sink (or
    dropped) in batches of ``BATCH_ROWS`` (call :meth:`flush` at the end); otherwise they accumulate.
    """

    record_requests: bool = True
    sink: Callable[[list[array]], None] | None = None
    columns: list[array] = field(default_factory=lambda: _columns())
    links: defaultdict[tuple[int, str], Intervals] = field(default_factory=lambda: defaultdict(Intervals))
    samples: SampleBuffer = field(default_factory=SampleBuffer)  # its type, not list: compiled code calls its append
    dropped: Counter = field(default_factory=Counter)  # requests, by reason
    counters: Counter = field(default_factory=Counter)  # engine-level counts: steps, stalls, prefetches...
    write_back_wait_s: float = 0.0  # seconds the scheduler waited on write_back copies (a count holds ints)
    # Aggregates kept even when per-request records are off.
    n_finished: int = 0
    totals: list[int] = field(default_factory=lambda: [0] * len(SUMMED))
    ttft: array = field(default_factory=lambda: array("d"))
    e2e: array = field(default_factory=lambda: array("d"))
    queue_wait: array = field(default_factory=lambda: array("d"))
    tpot: array = field(default_factory=lambda: array("d"))  # (finish - first token) / (output tokens - 1)

    def engine_metrics(self) -> dict:
        """The engine's counters under SGLang's names (L3 traffic, ``metrics_collector.py:2213-2290``),
        then the simulator's own, prefixed ``sim_``. ``storage_prefetch_unfulfilled_tokens_total`` carries
        only the reasons the model produces."""
        c = self.counters
        out: dict[str, Any] = {k: c[k] for k in ENGINE_COUNTERS}
        out["sim_write_back_wait_seconds_total"] = self.write_back_wait_s or 0  # 0 while nothing waited
        out["storage_prefetch_unfulfilled_tokens_total"] = {
            r: c[f"storage_prefetch_unfulfilled_tokens_total:{r}"] for r in UNFULFILLED_REASONS}  # fmt: skip
        return out

    def transfer(self, instance: int, link: str, start: float, end: float, nbytes: int) -> None:
        self.links[(instance, link)].add(start, end, nbytes)

    def request(self, rec: tuple) -> None:
        self.n_finished += 1
        self.ttft.append(rec[16])
        self.e2e.append(rec[17])
        self.queue_wait.append(rec[15])
        self.tpot.append((rec[7] - rec[6]) / max(rec[9] - 1, 1))
        for column, value in zip(self.columns, rec):
            column.append(value)
        if len(self.columns[0]) >= BATCH_ROWS and (self.sink is not None or not self.record_requests):
            self.flush()

    @property
    def held(self) -> int:
        """Records held (not yet handed to the sink)."""
        return len(self.columns[0])

    def flush(self) -> None:
        """Fold the held records into the totals and hand them to the sink (with none, those kept in memory
        stay)."""
        if not self.held or (self.sink is None and self.record_requests):
            return
        self.totals = self._totals()
        if self.sink is not None and self.record_requests:
            self.sink(self.columns)
        self.columns = _columns()  # new arrays: the sink may still hold views of the old ones

    def _totals(self) -> list[int]:
        return [t + sum(self.columns[at]) for t, at in zip(self.totals, _SUMMED_AT)]

    def token_totals(self) -> dict[str, int]:
        """The finished requests' token columns summed (``retractions`` is a count, not tokens: left out)."""
        return {c: int(v) for c, v in zip(SUMMED, self._totals()) if c != "retractions"}

    def requests_frame(self) -> pd.DataFrame:
        """The records held in memory (all of them when there is no sink)."""
        return _frame(self.columns) if self.record_requests else _frame(_columns())


    def link_bytes(self, link: str) -> int:
        return sum(b for (_, name), iv in self.links.items() if name == link for _, _, b in iv)

    def link_utilization(self, link: str, instances: int, horizon: float) -> float:
        """Busy time over ``horizon`` seconds, averaged over instances."""
        if horizon <= 0:
            return 0.0
        busy = sum(e - s for (_, name), iv in self.links.items() if name == link for s, e, _ in iv)
        return busy / (horizon * instances)

    def timeseries_frame(self, interval: float, instances: int) -> pd.DataFrame:
        """The periodic samples, with each link's busy fraction over the interval before each sample
        (``interval`` is the sampling interval actually kept)."""
        import pandas as pd

        df = pd.DataFrame.from_records(list(self.samples))
        if df.empty:
            return df
        for link in LINKS:
            col = np.zeros(len(df))
            for i in range(instances):
                mask = (df["instance"] == i).to_numpy()
                times = df.loc[mask, "time_s"].to_numpy()
                col[mask] = busy_fraction(self.links.get((i, link), []), times - interval, times)
            df[f"util_{link}"] = col
        return df


def _columns() -> list[array]:
    return [array(code) for code in _TYPECODES]


def _numpy(column: array) -> np.ndarray:
    """A column's values without a copy (int64 or float64, as its typecode)."""
    return np.frombuffer(column, dtype=np.int64 if column.typecode == "q" else np.float64)


def _frame(columns: list[array]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: _numpy(col).copy() for c, col in zip(REQUEST_COLUMNS, columns)})


class RequestWriter:
    """A Recorder sink: appends each batch of records to one Parquet file as a row group."""

    def __init__(self, path: str | Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self._schema = pa.Table.from_pandas(_frame(_columns()), preserve_index=False).schema
        self._writer = pq.ParquetWriter(Path(path), self._schema)

    def __call__(self, columns: list[array]) -> None:
        """One row group, straight from the held columns into the file's schema (no copy, no DataFrame)."""
        pa, schema = self._pa, self._schema
        arrays = [pa.array(_numpy(col), type=f.type) for col, f in zip(columns, schema)]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=schema))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def busy_fraction(intervals: Intervals | list[tuple[float, float, int]], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Share of each window [lo, hi) covered by the (non-overlapping) busy intervals."""
    if not intervals or len(lo) == 0:
        return np.zeros(len(lo))
    if isinstance(intervals, Intervals):
        starts, ends = np.array(intervals.starts, dtype=float), np.array(intervals.ends, dtype=float)
    else:
        iv = np.asarray([(s, e) for s, e, _ in intervals], dtype=float)
        starts, ends = iv[:, 0], iv[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def covered(t: np.ndarray) -> np.ndarray:
        """Busy time in [0, t)."""
        k = np.searchsorted(starts, t, side="right")  # intervals starting before t
        full = cum[np.maximum(k - 1, 0)]
        last = np.where(k > 0, np.clip(t - starts[np.maximum(k - 1, 0)], 0.0, ends[np.maximum(k - 1, 0)] - starts[np.maximum(k - 1, 0)]), 0.0)
        return np.where(k > 0, full + last, 0.0)

    width = np.maximum(hi - lo, 1e-12)
    return (covered(hi) - covered(lo)) / width


def percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def dropped_by_reason(metrics: dict) -> dict[str, int]:
    """Dropped tokens by reason: ``hicache_dropped_tokens_total`` summed over its ``pool`` label, plus
    the simulator's own ``sim_device_full_tokens_total`` (replayed requests L1 could not hold) as
    ``device_full`` when there are any."""
    out = {reason: sum(pools.values()) for reason, pools in metrics.get("hicache_dropped_tokens_total", {}).items()}
    if metrics.get("sim_device_full_tokens_total"):
        out["device_full"] = metrics["sim_device_full_tokens_total"]
    return out
