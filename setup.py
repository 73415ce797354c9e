"""The compiled build: with ``HICACHE_SIM_COMPILE=1``, mypyc compiles the engine's hot path (``sim.base.compiled``)
to C extensions; otherwise the install is pure Python. Everything else is in ``pyproject.toml``."""

import os
import runpy

from setuptools import setup


def ext_modules() -> list:
    if os.environ.get("HICACHE_SIM_COMPILE") != "1":
        return []
    # the build backend asks for mypy when compiling (tools/build_backend.py)
    from mypyc.build import mypycify

    return mypycify(runpy.run_path("sim/base/compiled.py")["sources"](), opt_level="3")


setup(ext_modules=ext_modules())
