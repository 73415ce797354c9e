"""Fixtures the command-line tests share."""

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest


@pytest.fixture
def fifo(tmp_path):
    """Make named pipes that cannot hang a test: a reader still waiting after 5 s (a regression that opens
    one) is given a writer that closes at once, so it reads an empty file and the test fails, not hangs."""
    made: list[Path] = []
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(5.0):
            for path in made:
                with contextlib.suppress(OSError):  # succeeds only while a reader has it open
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    def make(name: str = "pipe") -> Path:
        path = tmp_path / name
        os.mkfifo(path)
        made.append(path)
        return path

    watcher = threading.Thread(target=unblock, daemon=True)
    watcher.start()
    yield make
    done.set()
    watcher.join()


def _under_limit(argvs: list[list[str]], cwd: Path, *, fsize: int = 100, timeout: float = 120) -> list[tuple[int, str]]:
    """(exit status, stderr) of each command run by ``main`` in one child process whose files may not grow past
    ``fsize`` bytes (``ulimit -f``: every write past it fails with EFBIG; Python ignores SIGXFSZ)."""
    script = (
        "import contextlib, io, json, resource, sys\n"
        "from sim.app.cli import main\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, resource.RLIM_INFINITY))\n"
        "out = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "        code = main(argv)\n"
        "    out.append((code, err.getvalue()))\n"
        "sys.__stdout__.write(json.dumps(out))\n"  # a pipe: the limit is on files only
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(argvs)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(r) for r in json.loads(proc.stdout)]


@pytest.fixture
def under_limit():
    """:func:`_under_limit`: commands run where files may not grow past a size (EFBIG)."""
    return _under_limit


MAX_RSS_GROWTH_KB = 2 << 20  # 2 GB over a fuzzing module: a bomb expanded in memory would pass it


@pytest.fixture(scope="module")
def rss():
    """The module's peak memory grows by under ``MAX_RSS_GROWTH_KB``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < MAX_RSS_GROWTH_KB


@pytest.fixture
def fresh(tmp_path_factory):
    """A new folder for each example of a property test (the function's ``tmp_path`` is shared by them)."""
    return lambda: tmp_path_factory.mktemp("fuzz")
