"""Timers: CUDA events on a GPU, ``perf_counter`` on CPU; both warm up, repeat, and report median/p10/p90.

Repeats stop once ``min_repeats`` are done and either the median has settled (the median of all samples is
within 2% of the median of the first half) or the per-shape time budget is spent; never beyond ``max_repeats``.
``setup`` runs before every repeat, outside the timed region (the swap-in mutates its state and must be reset).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Timer", "Timing", "summarize"]


@dataclass(frozen=True)
class Timing:
    median_s: float
    p10_s: float
    p90_s: float
    repeats: int


def summarize(samples: list[float]) -> Timing:
    a = np.asarray(samples, dtype=float)
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), len(a))


def _settled(samples: list[float]) -> bool:
    half = float(np.median(samples[: len(samples) // 2]))
    whole = float(np.median(samples))
    return abs(whole - half) <= 0.02 * whole


@dataclass
class Timer:
    """Times a callable on ``device`` (``cpu`` or ``cuda``) with the given repeat policy."""

    device: str
    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 100
    budget_s: float = 0.5

    def time(self, fn: Callable[[], None], setup: Callable[[], None] | None = None) -> Timing:
        for _ in range(self.warmup):
            if setup:
                setup()
            fn()
        self._sync()
        samples: list[float] = []
        started = time.perf_counter()
        while len(samples) < self.max_repeats:
            if setup:
                setup()
            samples.append(self._once(fn))
            if len(samples) >= self.min_repeats and (
                _settled(samples) or time.perf_counter() - started > self.budget_s
            ):
                break
        return summarize(samples)

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _once(self, fn: Callable[[], None]) -> float:
        if self.device != "cuda":
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()  # idle stream: the events bracket this work only
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
