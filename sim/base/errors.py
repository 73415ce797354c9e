"""The one exception type that user-facing input problems raise.

The CLI turns an :class:`InputError` into a one-line message and exit status 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno
import os


class InputError(ValueError):
    """Bad user input: a file, line or field that the message names."""

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None) -> None:
        where = source if source is not None else ""
        if line is not None:
            where = f"{where}:{line}" if where else f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)


def os_error_text(exc: OSError) -> str:
    """An ``OSError`` as one line: the errno's meaning and its name (``File too large (EFBIG)``), whatever
    library raised it (pyarrow's text spans lines and repeats itself)."""
    if exc.errno is None:
        return " ".join(str(exc).split()) or type(exc).__name__
    return f"{os.strerror(exc.errno)} ({errno.errorcode.get(exc.errno, exc.errno)})"
