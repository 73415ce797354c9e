"""The call formats' shared token notation: ids as ``[first, count]`` runs, expanded and written back."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["expand_tokens", "host_runs", "token_runs"]


def expand_tokens(spec: Iterable) -> list[int]:
    """``[[1000, 3], 7]`` -> ``[1000, 1001, 1002, 7]``."""
    out: list[int] = []
    for item in spec:
        if isinstance(item, int):
            out.append(item)
        else:
            first, count = item
            out.extend(range(first, first + count))
    return out


def token_runs(tokens: list[int]) -> list:
    """Consecutive ids as ``[first, count]`` runs (how the recorded answers write them)."""
    out: list = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[j] + 1:
            j += 1
        out.append([tokens[i], j - i + 1])
        i = j + 1
    return out


def host_runs(tokens: list[int]) -> list:
    """Consecutive ids as ``[first, count]`` runs, a lone id as itself (how the host-tier answers write them)."""
    return [first if count == 1 else [first, count] for first, count in token_runs(tokens)]
