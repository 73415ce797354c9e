"""The compiled build: with ``HICACHE_SIM_COMPILE=1``, mypyc compiles the engine's hot path (``sim.base.compiled``)
to C extensions; otherwise the install is pure Python, and a pure build removes the extensions an earlier
compiled editable build left beside the sources (they would still be what runs). The rest is in
``pyproject.toml``."""

import os
import runpy
from pathlib import Path

from setuptools import setup

SOURCES = runpy.run_path("sim/base/compiled.py")["sources"]()


def ext_modules() -> list:
    if os.environ.get("HICACHE_SIM_COMPILE") != "1":
        for suffix in ("so", "pyd"):
            for src in SOURCES:
                for ext in Path(src).parent.glob(f"{Path(src).stem}.*.{suffix}"):
                    ext.unlink()
            for lib in Path().glob(f"*__mypyc.*.{suffix}"):
                lib.unlink()
        return []
    # mypy is installed for this build by the backend (tools/build_backend.py)
    from mypyc.build import mypycify

    return mypycify(SOURCES, opt_level="3")


setup(ext_modules=ext_modules())
