"""``compare``'s speed: the README's compare run serially and in worker processes, before and after.

    python bench/compare.py [--base COMMIT] [--workers 2] [--runs 1]

Runs the README's ``compare`` (write_through, boundary and the clairvoyant bound x 3 L1 x 4 L2 on the Mooncake
conversation trace: 36 cells) in a fresh process at ``--workers 1`` (in the process) and at ``--workers N``,
alternating, in this tree and, with ``--base``, in COMMIT's (checked out in a temporary ``git worktree``): wall
and CPU seconds (the process and its workers), the least of ``--runs`` each, and the ratios serial / parallel
(what the workers buy) and base / this (what a change bought). A shared machine's wall times are noisy and its
workers compete with other jobs for cores: CPU time is the figure to compare across trees, wall time what
``--workers`` buys on idle cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import ROOT, base_tree  # noqa: E402  (sibling scripts, not a package)
from startup import timed  # noqa: E402

COMPARE = ["compare", "data/mooncake_conversation_trace.jsonl", "--model", "generic", "--policies",
           "write_through,boundary,clairvoyant", "--l1-pages", "1000,6000,20000", "--l2-pages", "0,0.5x,2x,4x",
           "--no-progress"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", metavar="COMMIT", help="time COMMIT's compare too, alternating with this tree's")
    p.add_argument("--workers", type=int, default=2, help="the parallel run's worker processes (default: 2)")
    p.add_argument("--runs", type=int, default=1, help="runs of each (tree, workers) pair, least kept")
    args = p.parse_args()
    with base_tree(args.base) as base:
        trees = [("this", ROOT)] + ([(f"base {args.base}", base)] if base else [])
        pairs = [(label, tree, w) for label, tree in trees for w in (1, args.workers)]
        runs = [[timed(tree, [*COMPARE, "--workers", str(w)]) for _, tree, w in pairs] for _ in range(args.runs)]
    best = {(label, w): (min(r[i][0] for r in runs), min(r[i][1] for r in runs))
            for i, (label, _, w) in enumerate(pairs)}  # fmt: skip
    print(f"the README's compare (36 cells), least of {args.runs} alternating run(s), a fresh process each:")
    print(f"{'tree':<18}{'workers':>8}{'wall s':>9}{'CPU s':>9}{'serial / parallel wall':>24}")
    for label, _ in trees:
        serial_wall = best[label, 1][1]
        for w in (1, args.workers):
            cpu, wall = best[label, w]
            print(f"{label:<18}{w:>8}{wall:>9.1f}{cpu:>9.1f}{serial_wall / wall:>23.2f}x")
    if base:
        print("\nbase / this (above 1: this tree is faster):")
        for w in (1, args.workers):
            (c1, w1), (c0, w0) = best["this", w], best[trees[1][0], w]
            print(f"  --workers {w}: wall {w0 / w1:.2f}x, CPU {c0 / c1:.2f}x")


if __name__ == "__main__":
    main()
