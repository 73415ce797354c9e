"""The compiled build (``sim.base.compiled``): its modules type-check as mypyc needs, and a compiled copy of
this tree gives the pure-Python tree's outputs byte for byte."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from sim.base.compiled import MODULES, build_copy, sources

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "scenarios"

# One run of each kind of work the compiled modules do: the single-pool cache, V4 and V4.1 with L1 and L2
# (write_through and write_back), DP attention with MTP, L3 prefetch over two instances, a lane replay.
CASES = {
    "quickstart": ["quickstart.yaml"],
    "v4_l1l2": ["dsv4_flash_multiturn_l1l2.yaml"],
    "v4_write_back": ["dsv4_flash_multiturn_l1l2.yaml", "--set", "hicache.write_policy=write_back"],
    "v41_l1": ["dsv41_flash_multiturn_l1.yaml"],
    "dp_mtp": ["dsv4_flash_dp_mtp.yaml"],
    "l3": ["dsv4_flash_l3_two_instances.yaml"],
    "lanes": ["dsv4_flash_agentic_lanes.yaml"],
}


def test_each_compiled_module_is_a_source_file_of_this_tree():
    assert len(set(MODULES)) == len(MODULES)
    for src in sources():
        assert (ROOT / src).is_file(), src


def test_the_compiled_modules_type_check_clean():
    """mypyc compiles only code that type-checks, and trusts its annotations at run time."""
    api = pytest.importorskip("mypy.api")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *(str(ROOT / s) for s in sources())])
    assert status == 0, out + err


def _have_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and Path(sysconfig.get_paths()["include"], "Python.h").exists()


@pytest.fixture(scope="module")
def compiled_tree(tmp_path_factory) -> Path:
    pytest.importorskip("mypyc")
    if not _have_compiler():
        pytest.skip("no C compiler or Python headers")
    dest = tmp_path_factory.mktemp("compiled")
    build_copy(ROOT, dest)
    return dest


def _run(tree: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "sim.app.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)  # fmt: skip


def _probe(tree: Path, code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


@pytest.mark.slow
def test_a_compiled_copy_loads_every_compiled_module_as_an_extension(compiled_tree):
    loaded = _probe(compiled_tree, "from sim.base.compiled import compiled; print(','.join(compiled()))")
    assert loaded.split(",") == list(MODULES)
    assert _probe(ROOT, "from sim.base.compiled import compiled; print(len(compiled()))") == "0"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_compiled_copy_writes_the_pure_trees_outputs_byte_for_byte(compiled_tree, tmp_path, case):
    scenario, *extra = CASES[case]
    outs = {}
    for name, tree in (("pure", ROOT), ("compiled", compiled_tree)):
        outs[name] = tmp_path / name
        proc = _run(tree, ["run", str(SCENARIOS / scenario), *extra, "--out", str(outs[name]), "--no-progress"])
        assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in outs["pure"].iterdir())
    assert files == sorted(p.name for p in outs["compiled"].iterdir())
    match, mismatch, errors = filecmp.cmpfiles(outs["pure"], outs["compiled"], files, shallow=False)
    assert not mismatch and not errors, f"{case}: {mismatch or errors} differ"


@pytest.mark.slow
def test_an_edited_compiled_module_is_reported_stale(compiled_tree):
    """After an edit the extension, not the edit, runs: ``stale`` names the module (the CLI warns)."""
    code = "from sim.base.compiled import stale; print(','.join(stale()))"
    assert _probe(compiled_tree, code) == ""
    src = compiled_tree / "sim" / "cache" / "v4" / "leaforder.py"
    built = src.stat().st_mtime
    later = time.time() + 60  # an edit after the build
    os.utime(src, (later, later))
    try:
        assert _probe(compiled_tree, code) == "sim.cache.v4.leaforder"
    finally:
        os.utime(src, (built, built))
