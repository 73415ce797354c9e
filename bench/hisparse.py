"""Speed of the HiSparse hot-buffer models, and the decode batch HiSparse allows.

Prints top-k ids processed per second for LRU, CLOCK and Belady, each replaying the same pre-generated
streams (generation is not timed; Belady's timing includes its next-use precomputation), then misses per
step and the batch/throughput gain at 200K input for buffers of 4096 and 8192 slots.

    python bench/hisparse.py [--steps 1000] [--streams 4] [--input-len 200000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sim.hisparse import POLICIES, DecodeModelShape, HbmBudget, decode_capacity, run_stream
from sim.topk import ParametricAccess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=200_000)
    ap.add_argument("--output-len", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    shape = DecodeModelShape()
    k = shape.index_topk
    rng = np.random.default_rng(args.seed)
    streams = [ParametricAccess().stream(i, 0, args.input_len, args.steps, k, rng) for i in range(args.streams)]
    n_ids = sum(int((s.ids >= 0).sum()) for s in streams)
    print(f"{args.streams} streams x {args.steps} steps, top-k {k}, input {args.input_len}: {n_ids:,} ids")
    print(f"{'policy':8} {'buffer':>6} {'ids/s':>12} {'misses/step':>12} {'miss rate':>10}")
    for size in (4096, 8192):
        for policy in POLICIES:
            t0 = time.perf_counter()
            results = [run_stream(s, size, policy) for s in streams]
            dt = time.perf_counter() - t0
            misses = np.concatenate([r.misses[1:] for r in results])  # step 0 is the cold start
            acc = np.concatenate([r.accesses[1:] for r in results])
            print(f"{policy:8} {size:>6} {n_ids / dt:>12,.0f} {misses.mean():>12.1f} "
                  f"{misses.sum() / acc.sum():>10.3%}")

    budget = HbmBudget()
    print(f"\nKV budget {budget.kv_bytes / 1e9:.1f} GB of {budget.hbm_bytes / 1e9:.0f} GB HBM "
          f"({shape.name}, weights {budget.weight_bytes / 1e9:.0f} GB/GPU, assumed)")
    print(f"{'seq_len':>8} {'buffer':>6} {'MB/req base':>12} {'MB/req HiSp':>12} {'batch':>10} {'gain':>6} "
          f"{'tok/s base':>11} {'tok/s HiSp':>11}")
    for seq in (args.input_len, args.input_len + args.output_len):
        for size in (4096, 8192):
            c = decode_capacity(shape, budget, seq, size)
            print(f"{seq:>8} {size:>6} {c.bytes_per_request_baseline / 1e6:>12.1f} "
                  f"{c.bytes_per_request_hisparse / 1e6:>12.1f} "
                  f"{c.max_batch_baseline:>4}->{c.max_batch_hisparse:<5} {c.batch_gain:>6.2f} "
                  f"{c.tokens_per_s_baseline:>11,.0f} {c.tokens_per_s_hisparse:>11,.0f}")
    print("(throughput: roofline without swap-in cost; pass a cost table to decode_capacity to include it)")


if __name__ == "__main__":
    main()
