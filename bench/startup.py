"""Command-line start-up and ``compare`` speed: what a short command costs before it does anything.

    python bench/startup.py [--base COMMIT] [--repeat 5] [--workers 2]

(1) CPU seconds (user + system, the process and its children) of ``hicache-sim --help``, ``validate`` and ``run``
on the quickstart scenario, each in a fresh process, the least of ``--repeat`` alternating runs, in this tree and,
with ``--base``, in COMMIT's (checked out in a temporary ``git worktree``): the import cost pandas, pyarrow and
matplotlib add where a command does not need them. (2) The heaviest top-level imports of ``validate`` here
(``python -X importtime``, cumulative ms). (3) The README's ``compare`` (three policies x 3 L1 x 4 L2 on the
conversation trace) at ``--workers 1`` and ``--workers N``: wall and CPU seconds. A shared machine's wall times
are noisy; CPU time is what to compare across trees, wall time what ``--workers`` buys on idle cores.
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
COMPARE = ["compare", "data/mooncake_conversation_trace.jsonl", "--model", "generic", "--policies",
           "write_through,boundary,clairvoyant", "--l1-pages", "1000,6000,20000", "--l2-pages", "0,0.5x,2x,4x",
           "--no-progress"]  # fmt: skip


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


def compare_workers(workers: int) -> None:
    print("\nthe README's compare (36 cells), this tree:")
    for w in (1, workers):
        cpu, wall = timed(ROOT, [*COMPARE, "--workers", str(w)])
        print(f"  --workers {w}: {wall:6.1f} s wall, {cpu:6.1f} CPU s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", metavar="COMMIT", help="time the start-up commands in this commit's tree too")
    p.add_argument("--repeat", type=int, default=5, help="runs of each command per tree (least kept)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="compare's parallel run")
    p.add_argument("--no-compare", action="store_true", help="skip the compare timing")
    args = p.parse_args()
    with base_tree(args.base) as base:
        startup([("this", ROOT)] + ([(f"base {args.base}", base)] if base else []), args.repeat)
    heaviest_imports()
    if not args.no_compare:
        compare_workers(args.workers)


if __name__ == "__main__":
    main()
