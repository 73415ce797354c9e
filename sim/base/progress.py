"""Progress for the long commands: a bar with its total, percent and ETA on a terminal; off one (a log, CI, a
pipe), a plain line every ``PLAIN_EVERY_S`` seconds instead of carriage-return frames, and nothing at all for
work that ends sooner."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["PLAIN_EVERY_S", "PlainProgress", "advance_to", "progress_bar", "track"]

PLAIN_EVERY_S = 30.0


def progress_bar(total: int | None, *, desc: str, unit: str, enabled: bool = True, initial: int = 0,
                 stream: TextIO | None = None, every_s: float | None = None):  # fmt: skip
    """A tqdm bar on a terminal, a :class:`PlainProgress` off one (a line every ``every_s``, default
    ``PLAIN_EVERY_S``); either has ``update(n)`` and ``close()``."""
    from tqdm import tqdm

    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return tqdm(total=total, disable=True)
    if stream.isatty():
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, mininterval=0.5)
    return PlainProgress(total, desc=desc, unit=unit, initial=initial, stream=stream,
                         every_s=PLAIN_EVERY_S if every_s is None else every_s)  # fmt: skip


def advance_to(bar, n: float, total: float | None = None) -> None:
    """Move ``bar`` (either kind) forward to ``n``, out of ``total`` where given: a total the run learns as it
    goes (a lane replay's end moves when its warm-up ends). Runs on the simulated clock call it at the sampler's
    ticks, never per request."""
    if total is not None:
        bar.total = total
        n = min(n, total)
    if n > bar.n:
        bar.update(n - bar.n)


def track(items, *, desc: str, unit: str, enabled: bool = True, total: int | None = None):
    """Iterate over ``items`` with a :func:`progress_bar` counting them out of ``total`` (by default
    ``len(items)`` where they have one; a count alone where not)."""
    if total is None:
        try:
            total = len(items)
        except TypeError:
            total = None
    bar = progress_bar(total, desc=desc, unit=unit, enabled=enabled)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()


class PlainProgress:
    """``desc: 96/192 requests (50%), 12 s elapsed, about 12 s left`` every ``every_s`` seconds of wall time,
    and a last line at the end if any was printed. A heartbeat thread keeps the promise while no update comes
    (one run of a plan or of ``--seeds`` can take minutes)."""

    def __init__(self, total: int | None, *, desc: str, unit: str, initial: int = 0,
                 stream: TextIO | None = None, every_s: float = PLAIN_EVERY_S) -> None:  # fmt: skip
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = stream if stream is not None else sys.stderr
        self.every_s, self._initial = every_s, initial
        self._start = self._last = time.monotonic()
        self._printed = False
        self._lock, self._closed = threading.Lock(), threading.Event()
        if every_s > 0:
            threading.Thread(target=self._heartbeat, daemon=True).start()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._due()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._printed:
                self._line(time.monotonic(), done=True)

    def _heartbeat(self) -> None:
        while not self._closed.wait(self.every_s / 2):
            self._due()

    def _due(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last >= self.every_s and not self._closed.is_set():
                self._last = now
                self._line(now)

    def _line(self, now: float, done: bool = False) -> None:
        elapsed = now - self._start
        text = f"{self.desc}: {_count(self.n)}" + (f"/{_count(self.total)}" if self.total else "") + f" {self.unit}"
        if self.total:
            text += f" ({self.n / self.total:.0%})"
        text += f", {_duration(elapsed)} elapsed"
        made = self.n - self._initial
        if not done and self.total and made > 0:
            text += f", about {_duration(elapsed / made * (self.total - self.n))} left"
        print(text, file=self.stream, flush=True)
        self._printed = True


def _count(x: float) -> str:
    return f"{x:,.0f}" if isinstance(x, float) else f"{x:,}"


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"
