"""A call's page keys held as runs of consecutive ints, expanded only when the call is sent.

An agentic call's input is its chain's previous input and output plus new tokens, so its page keys are the
previous call's keys and a run of fresh ones: held as lists, a session's keys grow with the square of its
turns (an AgentX-sized corpus, ~57K parent calls half of them past 256K tokens, would hold over 28M keys of
256 tokens). Held as runs, a call costs a few ints whatever its context, and a replay's memory follows the
requests its lanes have in flight (each holds its expanded keys from dispatch to finish).
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from sim.base.errors import InputError

__all__ = ["PageRuns", "check_nesting"]


def check_nesting(block: int, page: int, what: str, source: str | None = None, line: int | None = None) -> None:
    """Refuse a trace's block size and a page size neither of which divides the other: a page is then
    neither whole blocks nor a whole part of one, so no block ids name it. ``what`` names both sizes where the
    user typed them (the one line's head, before ``: one must divide the other``)."""
    if page % block and block % page:
        raise InputError(f"{what}: one must divide the other", source=source, line=line)


class PageRuns:
    """Page keys as ``(first, length)`` runs of consecutive ints; iterating, indexing and slicing read them as
    the list they stand for."""

    __slots__ = ("_len", "runs")

    def __init__(self, runs: tuple[tuple[int, int], ...] = ()) -> None:
        self.runs = runs
        self._len = sum(n for _, n in runs)

    @classmethod
    def of(cls, keys: list[int]) -> PageRuns:
        """The runs of a list of keys (an interner's keys are mostly consecutive: a few runs a call)."""
        runs: list[tuple[int, int]] = []
        first, n = 0, 0
        for k in keys:
            if n and k == first + n:
                n += 1
                continue
            if n:
                runs.append((first, n))
            first, n = k, 1
        if n:
            runs.append((first, n))
        return cls(tuple(runs))

    def prefix(self, n: int) -> PageRuns:
        """The first ``n`` keys."""
        out: list[tuple[int, int]] = []
        for first, length in self.runs:
            if n <= 0:
                break
            out.append((first, min(length, n)))
            n -= length
        return PageRuns(tuple(out))

    def then(self, first: int, n: int) -> PageRuns:
        """These keys followed by ``first .. first + n - 1``."""
        if n <= 0:
            return self
        if self.runs and self.runs[-1][0] + self.runs[-1][1] == first:
            last = self.runs[-1]
            return PageRuns((*self.runs[:-1], (last[0], last[1] + n)))
        return PageRuns((*self.runs, (first, n)))

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(range(first, first + n) for first, n in self.runs)

    def __getitem__(self, k: int | slice) -> int | list[int]:
        if isinstance(k, slice):
            return list(self)[k]
        if k < 0:
            k += self._len
        for first, n in self.runs:
            if 0 <= k < n:
                return first + k
            k -= n
        raise IndexError("page index out of range")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PageRuns | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PageRuns({self.runs!r})"
