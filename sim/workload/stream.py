"""Workloads as streams: each request is made when it is sent, so a run holds only the requests in flight.

A synthetic workload draws its random figures (arrival times, lengths, prefix groups) up front, one call
each as before, so the seeded generator's draw order is unchanged; what it no longer holds is the requests
and their page-key lists (~500 B a request at 2,048-token prompts), made when a request is sent and
dropped when it finishes. A trace is read as it is replayed, after one pass (:meth:`RequestStream.survey`)
that checks every record and sizes the run, so bad input still stops the run before it starts.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.base.inputs import check_unchanged, file_stamp
from sim.base.progress import track
from sim.workload.request import Request

__all__ = ["CHUNK", "Concat", "IndexedRequests", "RequestStream", "Survey", "TraceRequests", "survey"]

# Requests a survey prices at once: over the 1M requests a workload could have while requests were held,
# so every workload that ran then still has its cost summed as one array, to the bit.
CHUNK = 1 << 20
Cost = Callable[[np.ndarray, np.ndarray], float]  # (input tokens, output tokens) as float arrays -> seconds


@dataclass(frozen=True)
class Survey:
    """What starting a run needs to know of its workload, from one pass: the request count, the last
    arrival, the smallest request (fewest input, then output tokens; the first of equals), ``cost``
    summed over every request, and ``largest``: (input, output) tokens of the request with the most tokens
    and of the one with the longest prompt (the first of equals), the two a check that every request fits tries."""

    requests: int
    last_arrival_s: float
    smallest: Request | None
    cost: float
    largest: tuple[tuple[int, int], ...] = ()


class RequestStream:
    """A workload's requests in sending order; iterating again yields equal requests."""

    def __iter__(self) -> Iterator[Request]:
        raise NotImplementedError

    def survey(self, cost: Cost, progress: bool = False) -> Survey:
        """``progress``: report the pass as it goes (a bar on a terminal, a line every 30 s off one) where
        it reads a file."""
        return survey(self, cost)


def survey(items: Iterable, cost: Cost) -> Survey:
    """One pass over ``items`` (requests, or lane calls: anything with ``input_len`` and ``output_len``),
    holding at most ``CHUNK`` lengths at a time."""
    count, last, best, total = 0, 0.0, None, 0.0
    most = widest = (0, 0)
    n_in, n_out = array("d"), array("d")
    for item in items:
        count += 1
        n_in.append(item.input_len)
        n_out.append(item.output_len)
        if item.input_len + item.output_len > most[0] + most[1]:
            most = (item.input_len, item.output_len)
        if item.input_len > widest[0]:
            widest = (item.input_len, item.output_len)
        if isinstance(item, Request):
            last = item.arrival_s
            if best is None or (item.input_len, item.output_len) < (best.input_len, best.output_len):
                best = item
        if len(n_in) == CHUNK:
            total += cost(np.frombuffer(n_in), np.frombuffer(n_out))
            n_in, n_out = array("d"), array("d")
    if n_in or not count:
        total += cost(np.frombuffer(n_in), np.frombuffer(n_out))
    return Survey(count, last, best, total, tuple(dict.fromkeys((most, widest))) if count else ())


class IndexedRequests(RequestStream, Sequence):
    """A synthetic workload: request ``i`` is made from figures drawn up front, on demand. Subclasses give
    ``__len__``, ``make(i)`` and ``lengths()``; a survey reads the lengths without making any request."""

    def make(self, i: int) -> Request:
        raise NotImplementedError

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Every request's (input tokens, output tokens), in order."""
        raise NotImplementedError

    def __getitem__(self, i: int) -> Request:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.make(i)

    def __iter__(self) -> Iterator[Request]:
        return map(self.make, range(len(self)))

    def survey(self, cost: Cost, progress: bool = False) -> Survey:
        n_in, n_out = self.lengths()
        n = len(n_in)
        if not n:
            return Survey(0, 0.0, None, cost(np.zeros(0), np.zeros(0)))
        total = 0.0
        for lo in range(0, n, CHUNK):
            total += cost(n_in[lo : lo + CHUNK].astype(float), n_out[lo : lo + CHUNK].astype(float))
        fewest = np.flatnonzero(n_in == n_in.min())
        largest = [(int(n_in[i]), int(n_out[i])) for i in (int(np.argmax(n_in + n_out)), int(np.argmax(n_in)))]
        return Survey(n, self.make(n - 1).arrival_s, self.make(int(fewest[np.argmin(n_out[fewest])])), total,
                      tuple(dict.fromkeys(largest)))  # fmt: skip


class Concat(IndexedRequests):
    """Indexed workloads one after the other (bench_serving's steps)."""

    def __init__(self, parts: list[IndexedRequests]) -> None:
        self.parts = parts
        self._ends = np.cumsum([len(p) for p in parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def make(self, i: int) -> Request:
        k = int(np.searchsorted(self._ends, i, side="right"))
        return self.parts[k].make(i - (int(self._ends[k - 1]) if k else 0))

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        pairs = [p.lengths() for p in self.parts]
        return (np.concatenate([a for a, _ in pairs]) if pairs else np.zeros(0, np.int64),
                np.concatenate([b for _, b in pairs]) if pairs else np.zeros(0, np.int64))  # fmt: skip


class TraceRequests(RequestStream):
    """A trace read as it is replayed: ``read()`` opens it again for every pass. Its size is known once
    a survey has read it through. With its ``path``, a pass over a file changed since the first pass is
    refused (before it starts, or at its end) rather than mixed into the run. ``records`` counts, before the
    survey, the requests it will find at most (the total its progress counts to; None where unknown)."""

    def __init__(self, read: Callable[[], Iterator[Request]], path: str | Path | None = None,
                 records: Callable[[], int | None] | None = None) -> None:  # fmt: skip
        self.read, self.path, self.records = read, path, records
        self._size: int | None = None
        self._stamp: tuple | None = None

    def __iter__(self) -> Iterator[Request]:
        if self.path is None:
            return self.read()
        if self._size is None:
            self._stamp = file_stamp(self.path)
        return self._checked()

    def _checked(self) -> Iterator[Request]:
        why = "a trace is read again as it is replayed"
        check_unchanged(self.path, self._stamp, why)
        yield from self.read()
        check_unchanged(self.path, self._stamp, why)

    def __len__(self) -> int:
        if self._size is None:
            raise TypeError("a trace's size is known after its survey")
        return self._size

    def survey(self, cost: Cost, progress: bool = False) -> Survey:
        items: Iterable[Request] = self
        if progress:  # a whole trace takes minutes to read through: say so as it goes
            items = track(self, desc=f"reading {Path(self.path).name if self.path else 'the trace'}", unit="requests",
                          total=self.records() if self.records else None)  # fmt: skip
        s = survey(items, cost)
        self._size = s.requests
        return s
