"""Replay's trace reading apart from its replaying, before and after: how much of a replay is reading.

    python bench/replay_read.py [--trace PATH] [--base COMMIT] [--runs 5]

For two configurations of ``hicache-sim replay`` on the Mooncake conversation trace, (a) the generic single-pool
model over 512-token pages and (b0) DeepSeek-V4-Flash's FULL + SWA cache over 256-token pages, both device only
and unbounded, it times apart, in a fresh process each:

  read    one pass over the trace as ``replay`` reads it (``iter_trace``: parse, check every record, build the
          page keys), streamed; ``replay`` makes two such passes (the check of every record before the replay,
          then the reads during it), so its reading costs about twice this;
  replay  the same replay over the requests read beforehand: the cache's work alone, the figure to set beside
          SGLang's tree (``bench/replay.py`` times its rows the same way).

CPU seconds, the least of ``--runs`` runs, the trees alternating: this tree and, with ``--base``, COMMIT's (checked
out in a temporary ``git worktree``), so old and new readers are timed in the same run; the ratios are base / this.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import ROOT, base_tree  # noqa: E402  (a sibling script, not a package)

CONFIGS = {"(a) generic, 512-token pages": ("generic", 512), "(b0) V4-Flash FULL+SWA, 256-token pages": ("deepseek-v4-flash", 256)}

# Run in the tree timed, through the API every tree since the trace stream has (iter_trace, replay, replay_v4).
_PROBE = """
import json, sys, time
from sim.cache.hicache import HiCache
from sim.cache.v4.swacache import v4_cache
from sim.model.pools import get_model
from sim.offline.replay import replay, replay_v4
from sim.workload.traces import iter_trace
trace, model_name, page, what = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
model = get_model(model_name)
read = lambda: iter_trace(trace, fmt="mooncake", block_size=512, page_size=page)
if what == "read":
    start = time.process_time()
    for _ in read():
        pass
else:
    requests = list(read())
    start = time.process_time()
    if model.has_swa:
        cache = v4_cache(model, l1_pages=None, l2_pages=0, policy="write_through", page=page,
                         load_back_threshold=10, swa_ratio=0.1)
        replay_v4(cache, model, requests)
    else:
        replay(HiCache(model, l1_pages=None, l2_pages=0, page_tokens=page), requests)
print(json.dumps(time.process_time() - start))
"""


def cpu_s(tree: Path, trace: Path, model: str, page: int, what: str) -> float:
    """CPU seconds of ``what`` (read or replay) in a fresh process on ``tree``'s ``sim``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(trace), model, str(page), what], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    return float(json.loads(out.splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=ROOT / "data" / "mooncake_conversation_trace.jsonl")
    p.add_argument("--base", metavar="COMMIT", help="time COMMIT's reader and replay too, alternating with this tree's")
    p.add_argument("--runs", type=int, default=5, help="runs of each figure per tree (least kept)")
    args = p.parse_args()
    trace = args.trace.resolve()
    with base_tree(args.base) as base:
        trees = [("this", ROOT)] + ([(f"base {args.base}", base)] if base else [])
        print(f"{trace.name}: CPU s, least of {args.runs} alternating runs, a fresh process each")
        print(f"{'configuration':<42}{'tree':<16}{'read':>8}{'replay':>8}{'read/replay':>13}")
        figures: dict[tuple[str, str], tuple[float, float]] = {}
        for name, (model, page) in CONFIGS.items():
            runs = [[(cpu_s(tree, trace, model, page, "read"), cpu_s(tree, trace, model, page, "replay"))
                     for _, tree in trees] for _ in range(args.runs)]  # fmt: skip
            for i, (label, _) in enumerate(trees):
                read, rep = min(run[i][0] for run in runs), min(run[i][1] for run in runs)
                figures[name, label] = read, rep
                print(f"{name:<42}{label:<16}{read:>8.3f}{rep:>8.3f}{read / rep:>12.2f}x")
        if base:
            print("\nbase / this (above 1: this tree is faster):")
            for name in CONFIGS:
                (r1, p1), (r0, p0) = figures[name, "this"], figures[name, trees[1][0]]
                print(f"  {name:<42}read {r0 / r1:.2f}x, replay {p0 / p1:.2f}x")


if __name__ == "__main__":
    main()
