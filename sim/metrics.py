"""What a timed run records, and how it is summarised.

The engine appends plain tuples on its hot path (per-request records, link busy intervals, periodic
samples); DataFrames and percentiles are built once, at the end. Counter names follow SGLang's
Prometheus metrics (``observability/metrics_collector.py``; ``shared/reference/sglang_hicache.md`` s7).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = ["LINKS", "REQUEST_COLUMNS", "Recorder", "busy_fraction", "dropped_by_reason"]

LINKS = ("h2d", "d2h", "l3_read", "l3_write")
REQUEST_COLUMNS = (
    "rid", "instance", "session", "round", "arrival_s", "admitted_s", "first_token_s", "finish_s",
    "input_tokens", "output_tokens", "device_hit_tokens", "host_hit_tokens", "storage_hit_tokens",
    "computed_tokens", "load_back_s", "queue_wait_s", "ttft_s", "e2e_s",
)  # fmt: skip

ENGINE_COUNTERS = (
    "prefetched_tokens_total", "backuped_tokens_total", "storage_prefetch_hit_tokens_total",
    "sim_prefetches_total", "sim_prefetch_requested_tokens_total", "sim_prefetch_retries_total",
    "sim_prefetch_rate_limited_total", "sim_write_back_wait_seconds_total",
)  # fmt: skip
UNFULFILLED_REASONS = ("below_threshold", "host_capacity", "storage_transfer", "deadline")


@dataclass
class Recorder:
    """Everything one run records. ``links[(instance, link)]`` holds (start, end, bytes) intervals."""

    record_requests: bool = True
    requests: list[tuple] = field(default_factory=list)
    links: dict[tuple[int, str], list[tuple[float, float, int]]] = field(default_factory=lambda: defaultdict(list))
    samples: list[dict] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # requests, by reason
    counters: Counter = field(default_factory=Counter)  # engine-level: steps, stalls, prefetches...
    # Aggregates kept even when per-request records are off.
    n_finished: int = 0
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)

    def engine_metrics(self) -> dict:
        """The engine's counters under SGLang's names (L3 traffic, ``metrics_collector.py:2213-2290``),
        then the simulator's own, prefixed ``sim_``. ``storage_prefetch_unfulfilled_tokens_total`` carries
        only the reasons the model produces."""
        c = self.counters
        out = {k: c[k] for k in ENGINE_COUNTERS}
        out["storage_prefetch_unfulfilled_tokens_total"] = {
            r: c[f"storage_prefetch_unfulfilled_tokens_total:{r}"] for r in UNFULFILLED_REASONS}  # fmt: skip
        return out

    def transfer(self, instance: int, link: str, start: float, end: float, nbytes: int) -> None:
        self.links[(instance, link)].append((start, end, nbytes))

    def request(self, rec: tuple) -> None:
        self.n_finished += 1
        self.ttft.append(rec[16])
        self.e2e.append(rec[17])
        if self.record_requests:
            self.requests.append(rec)

    def requests_frame(self) -> pd.DataFrame:
        return pd.DataFrame.from_records(self.requests, columns=list(REQUEST_COLUMNS))

    def link_bytes(self, link: str) -> int:
        return sum(b for (_, name), iv in self.links.items() if name == link for _, _, b in iv)

    def link_utilization(self, link: str, instances: int, horizon: float) -> float:
        """Busy time over ``horizon`` seconds, averaged over instances."""
        if horizon <= 0:
            return 0.0
        busy = sum(e - s for (_, name), iv in self.links.items() if name == link for s, e, _ in iv)
        return busy / (horizon * instances)

    def timeseries_frame(self, interval: float, instances: int) -> pd.DataFrame:
        """The periodic samples, with each link's busy fraction over the interval before each sample."""
        df = pd.DataFrame.from_records(self.samples)
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


def busy_fraction(intervals: list[tuple[float, float, int]], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Share of each window [lo, hi) covered by the (non-overlapping) busy intervals."""
    if not intervals or len(lo) == 0:
        return np.zeros(len(lo))
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


def percentiles(values: list[float]) -> dict[str, float]:
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
