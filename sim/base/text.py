"""Wording shared by the printed summaries, and the one rule for printing a string that came from a file."""

from __future__ import annotations

import re

__all__ = ["plural", "printable", "printable_lines", "seconds_text"]


def plural(n: int, word: str) -> str:
    """``1 pool``, ``7 pools``, ``1,024 pages``: the count with its noun as English says it."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


# What a terminal or a YAML comment would not show as written: C0 and C1 controls (ESC starts a terminal command,
# \n and \r start a line, and so do NEL and the Unicode separators in YAML), the byte-order mark, and the bidi
# controls that reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` as one line that shows what it holds: each character above written as Python escapes it
    (``\\x1b``, ``\\n``, ``\\r``). Every string read from a user's file goes through this before it is printed
    or written into a comment, so no value can clear a terminal, forge a line, or end a comment."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


def printable_lines(text: str) -> str:
    """A printed summary of several lines, each through :func:`printable`: its own line breaks kept, any inside
    a value from a file written as escapes."""
    return "\n".join(map(printable, text.split("\n")))


def seconds_text(seconds: float) -> str:
    """Seconds as a reader reads them: two significant figures, never an exponent (610 s, not 6.1e+02 s)."""
    if seconds >= 100:
        return f"{seconds:,.0f} s"
    return f"{float(f'{seconds:.2g}'):g} s" if seconds >= 1e-2 else f"{float(f'{seconds * 1e3:.2g}'):g} ms"
