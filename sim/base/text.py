"""Wording shared by the printed summaries."""

from __future__ import annotations

__all__ = ["plural"]


def plural(n: int, word: str) -> str:
    """``1 pool``, ``7 pools``, ``1,024 pages``: the count with its noun as English says it."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"
