"""Plan speed: the README's quickstart plan (its target: under 2 minutes on 2 cores), and the one-pass curve
against replays at each size.

    python bench/plan.py [--workers 2]

Prints the wall time of the whole plan (every run, the report and its pictures), its run count, and, on the
bundled conversation trace, the one-pass LRU curve's time next to one replay's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from sim.app.plan.build import PlanSpec, make_plan, parse_slo
from sim.app.plan.report import write_report
from sim.cache.hicache import HiCache
from sim.cache.mrc import miss_ratio_curve
from sim.model.pools import get_model
from sim.scenario.load import load_scenario
from sim.workload.traces import read_trace

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    spec = PlanSpec(load_scenario(ROOT / "scenarios" / "quickstart.yaml"), slo=parse_slo("ttft_p90=1s"),
                    decode=load_scenario(ROOT / "scenarios" / "hisparse_quick.yaml"))  # fmt: skip
    start = time.perf_counter()
    data = make_plan(spec, workers=args.workers)
    with tempfile.TemporaryDirectory() as tmp:
        write_report(data, Path(tmp))
    print(f"quickstart plan: {data['runs']} runs, {time.perf_counter() - start:.1f} s wall on {args.workers} workers")

    requests = read_trace(ROOT / "data" / "mooncake_conversation_trace.jsonl", fmt="mooncake", block_size=512,
                          page_size=512)  # fmt: skip
    start = time.perf_counter()
    curve = miss_ratio_curve(requests, 512)
    one_pass = time.perf_counter() - start
    start = time.perf_counter()
    cache = HiCache(get_model("generic"), l1_pages=12000, l2_pages=0, page_tokens=512)
    for r in requests:
        cache.serve(r.keys, r.input_len)
    replay = time.perf_counter() - start
    print(f"conversation trace: one-pass curve over all {curve.distinct_pages:,} sizes {one_pass:.2f} s, "
          f"one replay at 12,000 pages {replay:.2f} s")


if __name__ == "__main__":
    main()
