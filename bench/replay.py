"""Replay speed: how fast the residency core serves the Mooncake conversation trace.

    python bench/replay.py [--trace PATH] [--runs 3] [--sglang-path DIR] [--sglang-runs 1]

Measures, side by side in one run (median of ``--runs`` each; the trace is read once, outside the timing):

  (a) generic single-pool model, device only, unbounded, 512-token pages: the configuration comparable to
      SGLang's ``RadixCache`` (match + insert per request, nothing ever evicted);
  (b) DeepSeek-V4-Flash through SGLang's FULL + SWA cache (per-page SWA, chunked prefill, decode, release),
      L1 = 12000 and L2 = 24000 pages of 256 tokens (the token capacity of 6000 / 12000 512-token pages),
      write_through;
  (b0) the same, device only and unbounded, next to (a);
  (c) the whole ``hicache-sim replay`` process for (b), in a subprocess (interpreter start, imports,
      trace parsing, replay, printing), with the reading and replaying seconds it reports apart (``--json``'s
      ``read_s``, ``replay_s``; ``bench/replay_read.py`` times the reader alone, old and new);
  (d) per policy, generic model, L1 = 6000 / L2 = 12000 pages: each write policy under LRU, each
      eviction order under write_through, and the clairvoyant bound (its trace pass: page ids and next
      uses, built once, then one pass per capacity, at L1 and at L1 + L2 as replay runs it).

If SGLang is importable (``--sglang-path`` puts a ``pip install --no-deps --target DIR sglang`` first on
``sys.path``), its ``RadixCache.create_simulated(page_size=512)`` is driven the same way as (a), one
``match_prefix`` + ``insert`` per request, and the ratio to it is printed. SGLang's own V4 cache,
``UnifiedRadixCache`` with FULL + SWA components (``bench/sglang_v4.py``: real ``Req`` objects, the paged
``SWATokenToKVPoolAllocator``, the request lifecycle of (b0)), is driven over the same requests on its Rust
tree core (SGLang's default) and on its Python one, device only and unbounded like (b0), and on the Rust core
bounded like (b)'s L1 (12000 Full pages, 1200 SWA pages; no host tier: SGLang's HiCache is not driven), with
``--sglang-runs`` runs each (default 1: one replay takes minutes there). Its matched tokens are printed next to
ours. SGLang is never vendored or required: without it those rows say why they were skipped.

SGLang install for the comparison rows (its wheel unpacked, plus the dependencies its cache modules import):
the docstring of ``bench/sglang_v4.py``, then ``PYTHONPATH=SGDEPS python bench/replay.py --sglang-path SGDIR``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cache.clairvoyant import PageTrace  # noqa: E402
from sim.cache.eviction import EVICTION_POLICIES  # noqa: E402
from sim.cache.hicache import HiCache, WritePolicy  # noqa: E402
from sim.cache.v4.swacache import v4_cache  # noqa: E402
from sim.model.pools import get_model  # noqa: E402
from sim.offline.replay import replay, replay_v4  # noqa: E402
from sim.workload.traces import read_mooncake  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import sglang_v4  # noqa: E402

DEFAULT_TRACE = ROOT / "data" / "mooncake_conversation_trace.jsonl"
BLOCK = 512


def median_time(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def bench_generic(requests, runs):
    def once():
        cache = HiCache(get_model("generic"), l1_pages=None, l2_pages=0, page_tokens=BLOCK)
        replay(cache, requests)
        return cache

    return median_time(once, runs)


def bench_v4(requests, runs, l1, l2):
    model = get_model("deepseek-v4-flash")

    def once():
        cache = v4_cache(model, l1_pages=l1, l2_pages=l2, policy="write_through", page=256,
                         load_back_threshold=10, swa_ratio=0.1)  # fmt: skip
        return replay_v4(cache, model, requests).summary()

    return median_time(once, runs)


def bench_policies(requests, runs):
    """(label, seconds, L1 hit, L1+L2 hit) per policy, generic model, L1 6000 / L2 12000 pages."""
    model, rows = get_model("generic"), []
    combos = [(w.value, "lru") for w in WritePolicy] + [("write_through", e) for e in EVICTION_POLICIES if e != "lru"]
    for write, eviction in combos:

        def once(write=write, eviction=eviction):
            cache = HiCache(model, l1_pages=6000, l2_pages=12000, policy=write, eviction_policy=eviction,
                            page_tokens=BLOCK)  # fmt: skip
            replay(cache, requests)
            return cache

        sec, c = median_time(once, runs)
        rows.append((f"{write}+{eviction}", sec, c.stats.hit_rate(by="pages"),
                     c.stats.hit_rate(("device", "host"), by="pages")))  # fmt: skip

    def bound():
        trace = PageTrace(requests, BLOCK)
        return trace.bound(6000), trace.bound(18000)

    sec, (b1, b12) = median_time(bound, runs)
    rows.append(("clairvoyant bound (L1, L1+L2)", sec, b1.hit_rate("pages"), b12.hit_rate("pages")))
    return rows


def bench_cli(trace: Path, runs: int) -> tuple[float, float, float]:
    """The whole process's seconds, and the reading and replaying seconds it reports (``--json``), medians."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "sim.app.cli", "replay", str(trace), "--l1-pages", "12000", "--l2-pages",
               "24000", "--policy", "write_through", "--json", f"{tmp}/r.json"]  # fmt: skip
        parts = []

        def once():
            subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            d = json.loads(Path(f"{tmp}/r.json").read_text())
            parts.append((d["read_s"], d["replay_s"]))

        wall = median_time(once, runs)[0]
    return wall, statistics.median(r for r, _ in parts), statistics.median(p for _, p in parts)


def import_sglang(path: str | None):
    """``RadixCache`` and its parameter types, or the reason they cannot be imported."""
    try:
        sglang_v4.prepare(path)
        from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams
        from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    except Exception as exc:  # any import failure means: not usable here
        return None, f"{type(exc).__name__}: {exc}"
    return (RadixCache, RadixKey, MatchPrefixParams, InsertParams), ""


def bench_sglang(api, requests, runs):
    """SGLang's RadixCache, device only, unbounded: tokens are the block hash expanded to 512 ids."""
    import torch

    RadixCache, RadixKey, MatchPrefixParams, InsertParams = api
    token_lists = []
    for r in requests:
        ids = array("q")  # 8 bytes a token: the trace's 145M tokens as int lists would take gigabytes
        for h in r.keys:
            ids.extend(range(h * BLOCK, h * BLOCK + BLOCK))
        token_lists.append(ids)

    def once():
        cache = RadixCache.create_simulated(page_size=BLOCK)
        for ids in token_lists:
            cache.match_prefix(MatchPrefixParams(key=RadixKey(ids)))
            value = torch.arange(len(ids), dtype=torch.int64)
            cache.insert(InsertParams(key=RadixKey(ids), value=value))
        return cache

    return median_time(once, runs)


def bench_sglang_v4(v4_requests, runs):
    """SGLang's UnifiedRadixCache (FULL + SWA) over (b0)'s requests: rows of (label, seconds, note, ratio key),
    or the reason they were skipped."""
    api, why = sglang_v4.load(None)  # import_sglang already put --sglang-path on sys.path
    if api is None:
        return [], why
    model = get_model("deepseek-v4-flash")
    ours = v4_cache(model, l1_pages=None, l2_pages=0, policy="write_through", page=256, load_back_threshold=10,
                    swa_ratio=0.1)  # fmt: skip
    replay_v4(ours, model, v4_requests)
    bounded = v4_cache(model, l1_pages=12000, l2_pages=0, policy="write_through", page=256, load_back_threshold=10,
                       swa_ratio=0.1)  # fmt: skip
    replay_v4(bounded, model, v4_requests)
    sg_requests = sglang_v4.to_sglang(v4_requests)
    footprint = max(len(r.ids) + r.output_len for r in sg_requests) + 2 * sglang_v4.PAGE
    unbounded = dict(full_tokens=ours.tree.full_tokens + footprint, swa_tokens=ours.tree.swa_tokens + footprint)
    configs = [("rust", "unbounded", unbounded, ours), ("python", "unbounded", unbounded, ours),
               ("rust", "L1 12000", dict(full_tokens=12000 * 256, swa_tokens=1200 * 256), bounded)]  # fmt: skip
    rows = []
    for backend, label, pools, mine in configs:
        times = []
        for _ in range(runs):
            sec, sg = sglang_v4.replay(api, sg_requests, backend=backend, **pools)
            times.append(sec)
        hit = sg.matched / sg.input_tokens
        note = (f"L1 hit {hit:.2%}; {sg.alloc_s:.1f} s in the allocation helpers (torch on CPU); matched {sg.matched:,} tokens, ours {mine.stats['device_hit_tokens']:,} "
                f"({mine.stats['device_hit_tokens'] / sg.input_tokens:.2%}); tree holds Full "
                f"{sg.cache.full_evictable_size():,} / SWA {sg.cache.swa_evictable_size():,} tokens, "
                f"ours {mine.tree.full_tokens:,} / {mine.tree.swa_tokens:,}")  # fmt: skip
        core = "Rust" if sg.backend == "rust" else "Python"
        rows.append((f"SGLang V4 FULL+SWA ({core} core), {label}", statistics.median(times), note, (core, label)))
    return rows, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake JSONL trace (default: bundled)"
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per configuration; the median is reported")
    ap.add_argument("--sglang-path", help="directory holding an sglang install to compare with (optional)")
    ap.add_argument("--sglang-runs", type=int, default=1,
                    help="runs of each SGLang V4 row (default 1; one replay takes minutes there)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    requests = read_mooncake(args.trace, block_size=BLOCK)
    v4_requests = read_mooncake(args.trace, block_size=BLOCK, page_size=256)
    read_s = time.perf_counter() - t0
    n_req = len(requests)
    n_pages = sum(len(r.keys) for r in requests)
    print(f"trace {args.trace.name}: {n_req:,} requests, {n_pages:,} whole {BLOCK}-token input pages "
          f"(read in {read_s:.2f} s, not timed below); median of {args.runs} runs each")  # fmt: skip

    rows = []
    gen_s, gen = bench_generic(requests, args.runs)
    rows.append(("(a) generic 1 pool, device-only, unbounded", gen_s, f"L1 hit {gen.stats.hit_rate():.2%}"))
    v4u_s, v4u = bench_v4(v4_requests, args.runs, None, 0)
    rows.append(("(b0) V4-Flash FULL+SWA, device-only, unbounded", v4u_s, f"L1 hit {v4u['l1_hit_tokens']:.2%}"))
    v4_s, v4 = bench_v4(v4_requests, args.runs, 12000, 24000)
    rows.append(("(b) V4-Flash FULL+SWA, L1 12000 / L2 24000, WT", v4_s,
                 f"L1 {v4['l1_hit_tokens']:.2%}, L1+L2 {v4['l1l2_hit_tokens']:.2%}"))  # fmt: skip
    cli_s, cli_read_s, cli_replay_s = bench_cli(args.trace, args.runs)

    api, why = import_sglang(args.sglang_path)
    sg_s = None
    if api is not None:
        try:
            sg_s, _ = bench_sglang(api, requests, args.runs)
        except Exception as exc:  # a version whose API differs: report, do not fail the bench
            why = f"{type(exc).__name__}: {exc}"
    v4_rows, v4_why = [], why
    if api is not None:
        try:
            v4_rows, v4_why = bench_sglang_v4(v4_requests, args.sglang_runs)
        except Exception as exc:  # a version whose API differs: report, do not fail the bench
            v4_rows, v4_why = [], f"{type(exc).__name__}: {exc}"

    print(f"\n{'configuration':<48}{'seconds':>9}{'requests/s':>13}{'pages/s':>13}  result")
    for name, s, note in rows:
        print(f"{name:<48}{s:>9.3f}{n_req / s:>13,.0f}{n_pages / s:>13,.0f}  {note}")
    if sg_s is not None:
        print(
            f"{'SGLang RadixCache (page 512), unbounded':<48}{sg_s:>9.3f}{n_req / sg_s:>13,.0f}{n_pages / sg_s:>13,.0f}"
        )
    for name, s, note, _ in v4_rows:
        print(f"{name:<48}{s:>9.3f}{n_req / s:>13,.0f}{n_pages / s:>13,.0f}  {note}")
    if not v4_rows:
        print(f"{'SGLang V4 UnifiedRadixCache FULL+SWA':<48}  skipped ({v4_why}; install: bench/sglang_v4.py)")
    print(f"{'(c) hicache-sim replay process for (b)':<48}{cli_s:>9.3f}{n_req / cli_s:>13,.0f}{'':>13}  "
          f"whole process: start, imports, read, replay, print; it reports reading the trace {cli_read_s:.3f} s "
          f"(two passes), replaying {cli_replay_s:.3f} s")  # fmt: skip

    print("\n(d) per policy, generic 1 pool, L1 6000 / L2 12000 pages (hit rates by whole input pages)")
    print(f"{'policy':<48}{'seconds':>9}{'requests/s':>13}{'vs WT+LRU':>11}{'L1 hit':>9}{'L1+L2 hit':>11}")
    policy_rows = bench_policies(requests, args.runs)
    base = policy_rows[0][1]
    for name, s, l1, l12 in policy_rows:
        print(f"{name:<48}{s:>9.3f}{n_req / s:>13,.0f}{s / base:>10.2f}x{l1:>9.2%}{l12:>11.2%}")

    print("\nratios:")
    print(f"  (b0) / (a) time: {v4u_s / gen_s:.2f}x  (FULL + SWA request lifecycle vs one pool's match + insert)")
    print(f"  (b) / (a) time: {v4_s / gen_s:.2f}x  (bounded tiers, evictions, backups, load-backs on top)")
    print(f"  (c) / (b) time: {cli_s / v4_s:.2f}x  (process overhead on top of the replay itself)")
    print(f"  (c)'s replaying / (b) time: {cli_replay_s / v4_s:.2f}x  (the process's replay less its reads, against"
          f" the same replay over requests read beforehand)")  # fmt: skip
    if sg_s is not None:
        print(f"  SGLang RadixCache / (a) time: {sg_s / gen_s:.2f}x  (how many times faster our tree is)")
    else:
        print(f"  SGLang RadixCache: skipped ({why})")
    for _name, s, _, (core, label) in v4_rows:
        mine, what = (v4u_s, "(b0)") if label == "unbounded" else (v4_s, "(b)")
        print(f"  {what} / SGLang V4 {core} {label} time: {mine / s:.2f}x  (below 1: ours is faster)")
    if not v4_rows:
        print(f"  SGLang V4: skipped ({v4_why})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
