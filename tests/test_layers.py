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
LAYERS = ["base", "model", "workload", "cache", "serve", "hisparse", "offline", "scenario", "interop", "app"]


def _modules() -> dict[str, Path]:
    out = {}
    for path in SIM.rglob("*.py"):
        parts = path.relative_to(SIM.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path], *, type_only: bool = False) -> set[str]:
    """The ``sim`` modules a file imports anywhere (function bodies too); those under ``TYPE_CHECKING`` only
    with ``type_only``: a layer may name a type above it in an annotation, but a file may not circle back."""
    tree = ast.parse(path.read_text())
    skip = set() if type_only else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
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
FILE_GRAPH = {m: _imports(p, MODULES, type_only=True) - {m} for m, p in MODULES.items()}


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


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one file (Tarjan): each a circle a reader cannot enter at one end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for d in sorted(graph[m]):
            if d not in index:
                visit(d)
                low[m] = min(low[m], low[d])
            elif d in stack:
                low[m] = min(low[m], index[d])
        if low[m] == index[m]:
            group = []
            while True:
                d = stack.pop()
                group.append(d)
                if d == m:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return out


def test_no_circle_of_files_counting_every_import():
    """Function-level and type-only imports included, and a package's ``__init__`` is a file like any other:
    every file of ``sim`` can be read knowing only the files below it."""
    circles = _circles(FILE_GRAPH)
    assert not circles, f"{len(circles)} circles of files:\n" + "\n".join(", ".join(c) for c in circles)


def test_the_circle_finder_finds_a_circle_through_a_type_only_import(tmp_path):
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import B\n")
    (tmp_path / "b.py").write_text("def f():\n    from c import C\n")
    (tmp_path / "c.py").write_text("import a\n")
    mods = {p.stem: p for p in tmp_path.glob("*.py")}
    graph = {m: _imports(p, mods, type_only=True) for m, p in mods.items()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_nothing_under_sim_imports_torch_or_triton():
    heavy = sorted(str(p.relative_to(SIM.parent)) for p in MODULES.values()
                   if re.search(r"^\s*(import|from)\s+(torch|triton)\b", p.read_text(), re.M))  # fmt: skip
    assert not heavy, heavy


def test_no_layer_holds_much_more_than_a_fifth_of_the_code():
    """A layer a reader can take in: none past about a fifth of ``sim``'s lines (22%), so that growth shows up as
    a new layer or a split, not as one room that does everything."""
    lines = {layer: 0 for layer in LAYERS}
    for m, path in MODULES.items():
        if (layer := _layer(m)) is not None:
            lines[layer] += len(path.read_text().splitlines())
    total = sum(lines.values())
    big = {layer: f"{n / total:.0%}" for layer, n in lines.items() if n > 0.22 * total}
    assert not big, f"layers past 22% of sim's {total:,} lines: {big}"
