"""The compiled build: which modules mypyc compiles, building a compiled copy of a tree, and what is loaded.

The engine's hot path (the V4 cache, the scheduler, the event loop's own processes, the recorder) compiles
with mypyc to C extensions that run the same code about 2x faster: ``HICACHE_SIM_COMPILE=1 pip install .``
(``setup.py``). A plain install stays pure Python, as it runs everywhere. mypyc holds a compiled module's
annotations to the values at run time (an ``int`` that receives a float raises), so these modules are fully
annotated and type-check clean (``tests/sim/base/test_compiled.py``); values that are an int or ``inf`` are
``int | float``, since a compiled ``float`` would turn an int into a float and change what prints. A dataclass
made per request writes its own ``__init__`` (``init=False``): the methods the decorator generates are not
compiled, and run as Python. This module imports only the standard library: ``setup.py`` reads it before
anything is installed.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["MODULES", "build_copy", "compiled", "sources", "stale"]

MODULES = (
    "sim.workload.request",
    "sim.cache.budget",
    "sim.cache.v4.budget", "sim.cache.v4.node", "sim.cache.v4.running", "sim.cache.v4.leaforder",
    "sim.cache.v4.treestate", "sim.cache.v4.swa", "sim.cache.v4.full", "sim.cache.v4.evict",
    "sim.cache.v4.hosttier", "sim.cache.v4.unified", "sim.cache.v4.pools", "sim.cache.v4.controller",
    "sim.cache.v4.swacache", "sim.cache.v4.hicache",
    "sim.serve.config", "sim.serve.metrics", "sim.serve.scheduler.req", "sim.serve.state",
    "sim.serve.scheduler.instance_state", "sim.serve.scheduler.output", "sim.serve.scheduler.cache_controller",
    "sim.serve.scheduler.running_batch", "sim.serve.scheduler.schedule_policy", "sim.serve.scheduler.instance",
    "sim.serve.engine",
)  # fmt: skip


def sources() -> list[str]:
    """The compiled modules' source files, relative to the tree that holds ``sim/``."""
    return [m.replace(".", "/") + ".py" for m in MODULES]


def build_copy(root: Path, dest: Path) -> None:
    """Copy ``root``'s ``sim/`` and ``pyproject.toml`` (its mypy settings) to ``dest`` and compile the copy there
    (a C compiler and mypy needed); ``dest`` then runs compiled with ``PYTHONPATH=dest``."""
    shutil.copytree(root / "sim", dest / "sim", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
    proc = subprocess.run([sys.executable, "-m", "mypyc", *sources()], cwd=dest, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"mypyc failed in {dest}:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")


def _origin(module: str) -> str | None:
    spec = importlib.util.find_spec(module)
    return spec.origin if spec is not None else None


def compiled() -> list[str]:
    """The modules of :data:`MODULES` that load as compiled extensions here."""
    return [m for m in MODULES if (_origin(m) or "").endswith((".so", ".pyd"))]


def stale() -> list[str]:
    """Compiled modules whose source was edited after the last build: the extension, not the edit, runs. A
    module's extension is a stub; its code is in the build's shared library (``*__mypyc.*`` beside ``sim/``),
    which every build that changes any module rewrites."""
    out = []
    for m in compiled():
        ext = Path(_origin(m) or "")
        built = max(p.stat().st_mtime for p in [ext, *ext.parents[m.count(".")].glob("*__mypyc.*")])
        src = ext.parent / (m.rsplit(".", 1)[1] + ".py")
        if src.exists() and src.stat().st_mtime > built:
            out.append(m)
    return out
