"""Every piece of ``sim`` is small enough to read at once: no class over 250 lines, no function over 60.

Lines count from the ``def``/``class`` line to the last line of the body, docstring and comments included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sim

SIM = Path(sim.__file__).parent
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60


def _pieces() -> list[tuple[str, str, int]]:
    out = []
    for path in sorted(SIM.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                out.append((f"{path.relative_to(SIM.parent)}:{node.lineno} {node.name}", kind,
                            node.end_lineno - node.lineno + 1))  # fmt: skip
    return out


@pytest.mark.parametrize(("kind", "limit"), [("class", MAX_CLASS_LINES), ("function", MAX_FUNCTION_LINES)])
def test_no_piece_is_over_its_limit(kind, limit):
    over = sorted((n, where) for where, k, n in _pieces() if k == kind and n > limit)
    assert not over, f"{kind}es over {limit} lines:\n" + "\n".join(f"{n:5d}  {w}" for n, w in reversed(over))
