"""The package layout is the architecture: each layer of ``sim`` imports only the layers below it, no module
imports itself back through others, and nothing under ``sim`` needs torch or triton.

The order is read from the package docstrings (``May import: ...``), so the rule lives in one place.
"""

from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

import sim

SIM = Path(sim.__file__).parent
LAYERS = [name for name in ("base", "model", "workload", "cache", "serve", "hisparse", "offline", "app")]


def _modules() -> dict[str, Path]:
    out = {}
    for path in SIM.rglob("*.py"):
        parts = path.relative_to(SIM.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The ``sim`` modules a file imports anywhere (function bodies too), except under ``TYPE_CHECKING``."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}  # fmt: skip
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names}  # fmt: skip
    return {m for m in found if m in modules}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _allowed(layer: str) -> set[str]:
    doc = import_module(f"sim.{layer}").__doc__ or ""
    line = re.search(r"May import: (.*)", doc)
    assert line, f"sim.{layer}'s docstring says what it may import"
    text = line.group(1)
    return set(LAYERS[: LAYERS.index(layer)]) if "every layer below" in text else set(re.findall(r"``sim\.(\w+)``", text))


MODULES = _modules()
GRAPH = {m: _imports(p, MODULES) for m, p in MODULES.items()}


def test_every_module_lives_in_a_layer():
    loose = [m for m in MODULES if m != "sim" and _layer(m) is None]
    assert not loose, f"modules outside the layer packages: {loose}"


def test_each_layer_says_it_may_import_only_layers_below_it():
    for layer in LAYERS:
        assert _allowed(layer) <= set(LAYERS[: LAYERS.index(layer)]), layer


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_what_its_docstring_allows(layer):
    allowed = _allowed(layer) | {layer}
    upward = sorted(f"{m} -> {d}" for m, deps in GRAPH.items() if _layer(m) == layer
                    for d in deps if _layer(d) not in allowed and d != "sim")  # fmt: skip
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_module_imports_itself_back():
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(GRAPH[m]):
            if d.startswith(m + ".") or m.startswith(d + "."):  # a package and its own modules
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_nothing_under_sim_imports_torch_or_triton():
    heavy = sorted(str(p.relative_to(SIM.parent)) for p in MODULES.values()
                   if re.search(r"^\s*(import|from)\s+(torch|triton)\b", p.read_text(), re.M))  # fmt: skip
    assert not heavy, heavy
