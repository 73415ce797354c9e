"""setuptools' build backend, which also asks for mypy (mypyc) when ``HICACHE_SIM_COMPILE=1`` compiles the engine
(``setup.py``): a pure-Python install needs nothing beyond setuptools. Its requirement hooks answer without
running ``setup.py`` (setuptools' own run it, which would import mypyc before it is installed); the project
declares no other build requirements."""

import os

from setuptools.build_meta import *  # noqa: F403  (the backend's build hooks, unchanged)

MYPYC = ["mypy==2.4.1"]  # the version the compiled modules are type-checked with (pyproject's dev extra)


def _compiler() -> list[str]:
    return MYPYC if os.environ.get("HICACHE_SIM_COMPILE") == "1" else []


def get_requires_for_build_wheel(config_settings=None):
    return _compiler()


def get_requires_for_build_editable(config_settings=None):
    return _compiler()
