"""Command-line start-up: what a short command costs before it does anything.

    python bench/startup.py [--base COMMIT] [--repeat 5]

(1) CPU seconds (user + system, the process and its children) of ``hicache-sim --help``, ``validate`` and ``run``
on the quickstart scenario, each in a fresh process, the least of ``--repeat`` alternating runs, in this tree and,
with ``--base``, in COMMIT's (checked out in a temporary ``git worktree``): the import cost pandas, pyarrow and
matplotlib add where a command does not need them. (2) The heaviest top-level imports of ``validate`` here
(``python -X importtime``, cumulative ms). ``compare``'s speed, serial and in workers: ``bench/compare.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import ROOT, base_tree  # noqa: E402  (a sibling script, not a package)

QUICK = "scenarios/quickstart.yaml"


def timed(tree: Path, args: list[str]) -> tuple[float, float]:
    """(CPU s, wall s) of ``hicache-sim ARGS`` run from ``tree`` on ``tree``'s ``sim``, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sim.app.cli", *args], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def startup(trees: list[tuple[str, Path]], repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        commands = {"--help": ["--help"], "validate": ["validate", QUICK],
                    "run quickstart": ["run", QUICK, "--out", f"{tmp}/run", "--overwrite", "--no-progress"]}
        print(f"CPU s, least of {repeat} alternating runs, one process each:")
        print(f"{'command':<16}" + "".join(f"{label:>16}" for label, _ in trees))
        for name, args in commands.items():
            least = {label: min(timed(tree, args)[0] for _ in range(repeat)) for label, tree in trees}
            print(f"{name:<16}" + "".join(f"{least[label]:>16.3f}" for label, _ in trees))


def heaviest_imports(n: int = 8) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "sim.app.cli", "validate", QUICK], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True).stderr  # fmt: skip
    top = [(int(m.group(1)), m.group(2)) for m in re.finditer(r"\|\s*(\d+) \| {1,3}(\S+)$", err, flags=re.M)]
    print("\nvalidate's heaviest top-level imports here (cumulative ms): "
          + ", ".join(f"{name} {us / 1000:.0f}" for us, name in sorted(top, reverse=True)[:n]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", metavar="COMMIT", help="time the start-up commands in this commit's tree too")
    p.add_argument("--repeat", type=int, default=5, help="runs of each command per tree (least kept)")
    args = p.parse_args()
    with base_tree(args.base) as base:
        startup([("this", ROOT)] + ([(f"base {args.base}", base)] if base else []), args.repeat)
    heaviest_imports()


if __name__ == "__main__":
    main()
