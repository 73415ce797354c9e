"""Speed of the HiSparse hot-buffer models, and the decode batch and throughput HiSparse allows.

Prints top-k ids processed per second for LRU, CLOCK and Belady, each replaying the same pre-generated
streams (generation is not timed; Belady's timing includes its next-use precomputation); then, at 200K
input, SGLang's pool sizes, the max batch (and which pool caps it) and the roofline throughput with and
without HiSparse for buffers of 4096 and 8192 slots, across swa_full_tokens_ratio and host_to_device_ratio;
then where one decode step's time goes, which is what holds the throughput gain below the batch gain; then the
timed decode engine's CPU time on the HiSparse scenarios, here and, with ``--base COMMIT``, at that commit (a
temporary ``git worktree``), with ``--compiled`` in a copy compiled with mypyc too (bench/engine.py's helpers).

    PYTHONPATH=. python bench/hisparse.py [--steps 1000] [--streams 4] [--input-len 200000] [--base 9ebd5ae]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.engine import ROOT, base_tree, compiled_tree, timed_process
from sim.hisparse.buffer import POLICIES, DecodeModelShape, HbmBudget, decode_capacity
from sim.hisparse.coordinator import run_stream
from sim.hisparse.topk import ParametricAccess
from sim.model.costs import default_cost_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=200_000)
    ap.add_argument("--output-len", type=int, default=20_000)
    ap.add_argument("--kv-gb", type=float, default=100.0, help="GPU memory for the KV pools, GB")
    ap.add_argument("--max-running", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", metavar="COMMIT", help="time the decode engine at this commit too")
    ap.add_argument("--compiled", action="store_true", help="time the decode engine in a mypyc-compiled copy too")
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each tree (the least CPU time kept)")
    args = ap.parse_args()

    # The decode scenario's roofline: 13 GB of weights per step, 4.8 TB/s at 70% (sim/scenario/schema/compute.py ComputeConfig).
    shape = DecodeModelShape(weight_bytes_per_gpu=13e9)
    k = shape.index_topk
    rng = np.random.default_rng(args.seed)
    streams = [ParametricAccess().stream(i, 0, args.input_len, args.steps, k, rng) for i in range(args.streams)]
    n_ids = sum(int((s.ids >= 0).sum()) for s in streams)
    print(f"{args.streams} streams x {args.steps} steps, top-k {k}, input {args.input_len}: {n_ids:,} ids")
    print(f"{'policy':8} {'buffer':>6} {'fill':>8} {'ids/s':>12} {'misses/step':>12} {'miss rate':>10}")
    misses_at: dict[int, float] = {}
    for size in (2048, 4096, 8192, 16384):  # the hot-buffer size against misses per step
        for policy in POLICIES:
            for fill in ("direct", "staging") if policy == "lru" else ("direct",):
                t0 = time.perf_counter()
                results = [run_stream(s, size, policy, fill) for s in streams]
                dt = time.perf_counter() - t0
                misses = np.concatenate([r.misses[1:] for r in results])  # step 0 is the cold start
                acc = np.concatenate([r.accesses[1:] for r in results])
                if policy == "lru" and fill == "direct":
                    misses_at[size] = float(misses.mean())
                print(f"{policy:8} {size:>6} {fill:>8} {n_ids / dt:>12,.0f} {misses.mean():>12.1f} "
                      f"{misses.sum() / acc.sum():>10.3%}")

    costs = default_cost_table()
    budget = HbmBudget(hbm_bytes=args.kv_gb * 1e9, hbm_bandwidth=4.8e12 * 0.7, mem_fraction_static=1.0,
                       weight_bytes=0.0)
    final = args.input_len + args.output_len
    print(f"\n{shape.name}, {args.kv_gb:g} GB of KV pools, max_running_requests {args.max_running}, "
          f"final length {final:,} (admission reserves prompt + max new tokens); roofline at 3.36 TB/s, "
          f"weights 13 GB/step; swap-in: LRU misses above x {costs.source.kind} cost table")
    print(f"{'swa ratio':>9} {'h2d ratio':>9} {'buffer':>6} {'B/full tok off':>14} {'on':>7} {'MB/req off':>10} "
          f"{'on':>6} {'batch off':>10} {'on':>12} {'gain':>5} {'tok/s off':>9} {'on':>7} {'gain':>5} {'swap':>5} "
          f"{'pays from':>9}")
    for swa in (0.1, 0.004):
        for ratio in (2, 5, 10):
            for size in (4096, 8192):
                c = decode_capacity(shape, budget, final, size, misses_at[size], costs, k,
                                    swa_full_tokens_ratio=swa, host_to_device_ratio=ratio,
                                    max_running_requests=args.max_running)
                print(f"{swa:>9g} {ratio:>9} {size:>6} {c.pools_baseline.bytes_per_full_token:>14,.0f} "
                      f"{c.pools_hisparse.bytes_per_full_token:>7,.0f} {c.bytes_per_request_baseline / 1e6:>10,.0f} "
                      f"{c.bytes_per_request_hisparse / 1e6:>6,.0f} {c.max_batch_baseline:>4} {c.limit_baseline:<5}"
                      f" {c.max_batch_hisparse:>4} {c.limit_hisparse:<7} {c.batch_gain:>5.2f} "
                      f"{c.tokens_per_s_baseline:>9,.0f} {c.tokens_per_s_hisparse:>7,.0f} "
                      f"{c.tokens_per_s_hisparse / c.tokens_per_s_baseline:>5.2f} "
                      f"{c.swap_in_seconds_per_step / c.step_seconds_hisparse:>5.0%} "
                      f"{c.break_even_batch if c.break_even_batch is not None else 'never':>9}")

    print(f"\nOne decode step at {final:,} tokens (swa ratio 0.004, host_to_device_ratio 10, 4096 slots):")
    c = decode_capacity(shape, budget, final, 4096, misses_at[4096], costs, k, swa_full_tokens_ratio=0.004,
                        host_to_device_ratio=10, max_running_requests=args.max_running)
    bw = budget.hbm_bandwidth
    idx = shape.indexer_read_bytes(final)
    rest = shape.kv_read_bytes(final, k) - idx
    print(f"  per request and step: {shape.kv_read_bytes(final, k) / 1e6:.0f} MB read, of which the C4 indexer's "
          f"scan of every compressed key {idx / 1e6:.0f} MB ({idx / shape.kv_read_bytes(final, k):.0%})")
    print(f"{'':2}{'':9} {'batch':>6} {'weights ms':>10} {'indexer ms':>10} {'other KV ms':>11} {'swap-in ms':>10} "
          f"{'step ms':>8} {'tok/s':>8}")
    for label, n, swap in (("off", c.max_batch_baseline, 0.0), ("on", c.max_batch_hisparse,
                                                                 c.swap_in_seconds_per_step)):
        w, i, o = shape.weight_bytes_per_gpu / bw, n * idx / bw, n * rest / bw
        step = w + i + o + swap
        print(f"  {label:9} {n:>6} {w * 1e3:>10.2f} {i * 1e3:>10.2f} {o * 1e3:>11.2f} {swap * 1e3:>10.2f} "
              f"{step * 1e3:>8.2f} {n / step:>8,.0f}")
    print(f"  ceiling (any batch, no swap-in): {bw / shape.kv_read_bytes(final, k):,.0f} tok/s = HBM bandwidth / "
          "KV read per request")

    with contextlib.ExitStack() as stack:
        base = stack.enter_context(base_tree(args.base))
        compiled = stack.enter_context(compiled_tree(args.compiled))
        engine_speed(base, args.base, compiled, args.repeat)


DECODE_SCENARIOS = ("dsv4_flash_hisparse_200k", "hisparse_quick")


def engine_speed(base: Path | None, commit: str | None, compiled: Path | None, repeat: int) -> None:
    """The decode engine's CPU time per scenario, each run in a process of its own, the trees alternating; the
    least of each tree's times is kept (load on a shared machine only adds)."""
    trees = ([("base", base)] if base else []) + [("this", ROOT)] + ([("compiled", compiled)] if compiled else [])
    print(f"\ndecode engine, CPU s (one process each, least of {repeat}" + (f"; base {commit}" if commit else "") + "):")
    print(f"{'scenario':<28}{'requests':>9}" + "".join(f"{label + ' s':>11}" for label, _ in trees)
          + ("".join(f"{label + ' x':>11}" for label, _ in trees[1:]) if base else ""))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for name in DECODE_SCENARIOS:
            cpu: dict[str, list[float]] = {label: [] for label, _ in trees}
            for _ in range(repeat):
                for label, tree in trees:
                    own = base if label == "base" else ROOT
                    r = timed_process(tree, own / f"scenarios/{name}.yaml", [], str(Path(tmp) / "requests.parquet"))
                    cpu[label].append(r["cpu_s"])
            least = {label: min(v) for label, v in cpu.items()}
            print(f"{name:<28}{r['requests']:>9,}" + "".join(f"{least[label]:>11.2f}" for label, _ in trees)
                  + ("".join(f"{least['base'] / least[label]:>10.2f}x" for label, _ in trees[1:]) if base else ""))


if __name__ == "__main__":
    main()
