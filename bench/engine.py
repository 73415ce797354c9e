"""Engine speed: simulated requests per wall second, and events per second against bare SimPy.

    python bench/engine.py [--instances 4] [--requests 1000000] [--base fb467f9]

Runs, side by side in one process: (1) SimPy alone, a process yielding timeouts (the ceiling any SimPy
model can reach here); (2) the multi-turn scenario (V4-Flash, L1+L2); (3) the whole Mooncake conversation
trace in time (12,031 requests, one hour of traffic). With the ``aic`` extra installed, (2) and (3) run
again with their passes priced by aiconfigurator-core (``compute.backend=aiconfigurator``, V4-Flash's FP8
checkpoint on H200, as the scenarios' GPU label says), and the wall time is shown against the roofline's
(the ``vs roofline`` column; a different clock also changes the batches, so part of the ratio is the run
itself). Absolute times on shared machines are noisy: read the ratios.

Then (4) the million-request figure: ``bench/synthetic_v4_l1l2.yaml`` (synthetic V4-Flash requests, L1 + L2,
records streamed to a Parquet file as ``hicache-sim run`` does) at ``--requests`` and at a quarter of it,
each in a process of its own, in this tree and in a copy of it compiled with mypyc (``sim.base.compiled``, built
in a temporary folder; ``--no-compiled`` skips it), the two alternating: wall time, requests per wall second,
CPU time (what one core spent: the figure to read on a shared machine), peak RSS, and the bytes each request adds
at the margin (the RSS difference over the request difference; flat memory reads ~0). ``--requests 0`` skips it.
(5) The same case overloaded (``--overload``, five times its rate): CPU time per request at two request counts,
flat when the engine stays linear with a long queue. (6) With ``--base COMMIT``, the bundled multi-turn scenarios
timed in this tree (and its compiled copy) and in COMMIT's (checked out in a temporary ``git worktree``, removed
after), each in a process of its own: the least CPU time of ``--repeat`` alternating runs each; ``--base fb467f9``
against the regroup, ``--base 8bae819`` against the tree issue 20 was filed on (flat modules).
(7) A lane replay (``scenarios/dsv4_flash_agentic_lanes.yaml``, 120 s measured) over generated Weka corpora of
``--corpus`` and four times as many trajectories (written to a temporary folder): CPU time and peak RSS, flat in
the corpus when the replay holds only the trajectories its lanes play.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import simpy

from sim.app.run import build, summarise
from sim.base.compiled import MODULES, build_copy
from sim.base.compiled import compiled as compiled_here
from sim.scenario.load import load_scenario

# What this tree runs as: "pure" from a source install; a tree compiled in place is labelled so.
ROOT_BUILD = "compiled in place" if compiled_here() else "pure"

ROOT = Path(__file__).resolve().parent.parent
MULTI_TURN = ("quickstart", "dsv4_flash_multiturn_l1", "dsv4_flash_multiturn_l1l2", "dsv41_flash_multiturn_l1",
              "dsv41_flash_multiturn_l1l2", "mla_baseline_multiturn")  # fmt: skip
# One timed run in a fresh process (argv: scenario, requests_out or "-", overrides...), in whichever tree
# PYTHONPATH names: it uses only names that tree and fb467f9 both have, or a flat tree's (before the regroup,
# such as 8bae819, the tree issue 20 was filed on). Prints one JSON line. Peak RSS is this process's own
# (VmHWM): Linux carries ru_maxrss over an exec, so that would be the parent's when larger.
_TIMED = """
import json, re, resource, sys, time
try:
    from sim.app.run import build, run_scenario
    from sim.scenario.load import load_scenario
except ModuleNotFoundError:  # a flat tree, from before the regroup
    from sim.run import build, run_scenario
    from sim.scenario import load_scenario
sc = load_scenario(sys.argv[1], sys.argv[3:])
start, cpu = time.perf_counter(), time.process_time()
if sys.argv[2] == "-":
    sim, arrivals, n = build(sc)
    sim.run(arrivals)
    n = sim.rec.n_finished
else:
    n = run_scenario(sc, requests_out=sys.argv[2]).summary["requests"]["finished"]
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
try:
    rss_kb = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
except OSError:
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"requests": n, "wall_s": wall, "cpu_s": cpu, "rss_mb": rss_kb / 1024}))
"""


def bare_simpy(n: int = 500_000) -> float:
    env = simpy.Environment()

    def ticker():
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(ticker())
    start = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - start)


def timed_run(path: Path, overrides: list[str]) -> dict:
    sc = load_scenario(path, overrides)
    sim, arrivals, _ = build(sc)
    env = sim.env
    events = 0
    step = env.step

    def counting_step():
        nonlocal events
        events += 1
        step()

    env.step = counting_step
    start = time.perf_counter()
    sim.run(arrivals)
    wall = time.perf_counter() - start
    s = summarise(sc, sim)
    return {"name": sc.name, "requests": s["requests"]["finished"], "wall_s": wall, "events": events,
            "simulated_s": s["simulated_s"]}  # fmt: skip


def timed_process(tree: Path, scenario: Path, overrides: list[str], requests_out: str = "-") -> dict:
    """One run of ``scenario`` in a fresh process importing ``tree``'s ``sim``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _TIMED, str(scenario), requests_out, *overrides], cwd=tree, env=env,
                         check=True, capture_output=True, text=True)  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])


def million(n: int, compiled: Path | None) -> None:
    """(4): the synthetic V4 case at ``n`` and ``n / 4`` requests, and the bytes per request at the margin; in this
    tree as installed from source (pure Python) and in its ``compiled`` copy, the two alternating."""
    path = ROOT / "bench/synthetic_v4_l1l2.yaml"
    trees = [(ROOT_BUILD, ROOT)] + ([("compiled", compiled)] if compiled else [])
    print(f"\n{path.relative_to(ROOT)} (one process each, records streamed to Parquet):")
    print(f"{'build':<10}{'requests':>12}{'wall s':>10}{'req/wall s':>12}{'CPU s':>9}{'req/CPU s':>11}"
          f"{'peak RSS MB':>13}")  # fmt: skip
    runs: dict[str, list[dict]] = {label: [] for label, _ in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for k in (n // 4, n):
            for label, tree in trees:
                r = timed_process(tree, path, [f"workload.num_requests={k}"], str(Path(tmp) / "requests.parquet"))
                runs[label].append(r)
                print(f"{label:<10}{r['requests']:>12,}{r['wall_s']:>10.1f}{r['requests'] / r['wall_s']:>12,.0f}"
                      f"{r['cpu_s']:>9.1f}{r['requests'] / r['cpu_s']:>11,.0f}{r['rss_mb']:>13,.0f}")  # fmt: skip
    for label, (a, b) in runs.items():
        margin = (b["rss_mb"] - a["rss_mb"]) * 2**20 / max(1, b["requests"] - a["requests"])
        print(f"{label}: bytes per request at the margin: {margin:,.0f} B ((RSS at {b['requests']:,} - at "
              f"{a['requests']:,}) / the requests between)")
    if compiled:
        (_, pure), (_, comp) = runs[ROOT_BUILD], runs["compiled"]
        print(f"compiled over {ROOT_BUILD}, CPU time at {pure['requests']:,} requests: "
              f"{pure['cpu_s'] / comp['cpu_s']:.2f}x")


def overload(n: int) -> None:
    """(5): the synthetic V4 case sent at five times its rate, faster than the instance serves, so the waiting queue
    grows to most of the requests: at ``n / 4`` and ``n`` requests, CPU time per request. Flat is linear in the
    request count; a per-pass cost that grows with the queue shows as a rise. With L3 too, the lookups that miss
    are retried every 8 passes while the requests wait. The pools are a tenth of the case's
    (and its prefixes a tenth), so both pools are full and host eviction runs from the first few thousand requests
    on: what is compared is the same steady state at two queue lengths."""
    path = ROOT / "bench/synthetic_v4_l1l2.yaml"
    print(f"\n{path.relative_to(ROOT)} at 30 requests/s, a tenth of the pools (overloaded; one process each):")
    print(f"{'tiers':<14}{'requests':>12}{'CPU s':>9}{'CPU us/request':>16}")
    base = ["workload.rate=30", "hardware.kv_mem_gb=4", "workload.num_prefix_groups=1000"]
    for tiers, extra in (("L1 + L2", []), ("L1 + L2 + L3", ["l3.enabled=true", "hicache.prefetch_threshold=256"])):
        for k in (n // 4, n):
            r = timed_process(ROOT, path, [f"workload.num_requests={k}", *base, *extra])
            print(f"{tiers:<14}{r['requests']:>12,}{r['cpu_s']:>9.1f}{r['cpu_s'] / r['requests'] * 1e6:>16,.0f}")


def corpus(n: int, base: Path | None) -> None:
    """(7): a lane replay over generated corpora of ``n`` and ``4 n`` AgentX-like trajectories (30 turns on
    average, contexts growing by ~3K tokens a turn up to 128K; ~300 KB of JSON each), here and in ``base``."""
    from sim.scenario.schema import AgenticWorkload
    from sim.workload.agentic import generate_sessions

    path = "scenarios/dsv4_flash_agentic_lanes.yaml"
    trees = [("this", ROOT)] + ([("base", base)] if base and (base / path).exists() else [])  # lanes came later
    print(f"\n{path} over generated Weka corpora, 120 s measured (one process each):")
    print(f"{'tree':<6}{'trajectories':>13}{'file MB':>9}{'CPU s':>8}{'peak RSS MB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for k in (n, 4 * n):
            w = AgenticWorkload(sessions=k, turns_per_session=30, first_turn_tokens=4000, context_growth_tokens=3000,
                                max_context=131072, output_tokens=400, subagent_probability=0.2)  # fmt: skip
            file = Path(tmp) / f"corpus_{k}.jsonl"
            with file.open("w") as fh:
                for rec in generate_sessions(w, np.random.default_rng(3), k):
                    fh.write(json.dumps(rec) + "\n")
            for label, tree in trees:
                r = timed_process(tree, tree / path, [f"workload.path={file}", "workload.benchmark_duration_s=120"])
                print(f"{label:<6}{k:>13,}{file.stat().st_size / 2**20:>9,.0f}{r['cpu_s']:>8.1f}{r['rss_mb']:>13,.0f}")


@contextlib.contextmanager
def base_tree(commit: str | None) -> Iterator[Path | None]:
    """``commit`` checked out in a temporary ``git worktree`` (removed after), or None without one."""
    if commit is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), commit], check=True,
                       capture_output=True)  # fmt: skip
        try:
            yield base
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=True)


@contextlib.contextmanager
def compiled_tree(wanted: bool) -> Iterator[Path | None]:
    """A compiled copy of this tree in a temporary folder (``sim.base.compiled.build_copy``), or None when not
    wanted or no compiler is at hand."""
    if not wanted or importlib.util.find_spec("mypyc") is None:
        if wanted:
            print("compiled build: mypyc not installed (pip install -e '.[dev]'), skipped")
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        try:
            build_copy(ROOT, Path(tmp))
        except (RuntimeError, OSError) as exc:
            print(f"compiled build failed, skipped: {str(exc).splitlines()[0]}")
            yield None
            return
        print(f"compiled build: {len(MODULES)} modules with mypyc in {time.perf_counter() - start:.0f} s")
        yield Path(tmp)


def against_base(base: Path, commit: str, repeat: int, compiled: Path | None) -> None:
    """(6): the multi-turn scenarios' CPU time here (and in the ``compiled`` copy) and at ``commit`` (checked out
    at ``base``), each run in a process of its own, the trees alternating ``repeat`` times; the least of each
    tree's times is kept, as load on a shared machine only ever adds to a run's time."""
    trees = [("base", base), ("this", ROOT)] + ([("compiled", compiled)] if compiled else [])
    print(f"\nmulti-turn scenarios, CPU s (one process each, least of {repeat} alternating; base {commit}):")
    print(f"{'scenario':<30}{'requests':>10}" + "".join(f"{label + ' s':>11}" for label, _ in trees)
          + "".join(f"{label + ' x':>12}" for label, _ in trees[1:]))  # fmt: skip
    for name in MULTI_TURN:
        cpu: dict[str, list[float]] = {label: [] for label, _ in trees}
        for _ in range(repeat):
            for label, tree in trees:
                own = base if label == "base" else ROOT  # the base runs its own copy of the scenario
                r = timed_process(tree, own / f"scenarios/{name}.yaml", [])
                cpu[label].append(r["cpu_s"])
        least = {label: min(v) for label, v in cpu.items()}
        print(f"{name:<30}{r['requests']:>10,}" + "".join(f"{least[label]:>11.2f}" for label, _ in trees)
              + "".join(f"{least['base'] / least[label]:>11.2f}x" for label, _ in trees[1:]))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=4, help="instances serving the conversation trace")
    p.add_argument("--requests", type=int, default=1_000_000, help="requests of the synthetic case (0: skip it)")
    p.add_argument("--overload", type=int, default=40_000, help="requests of the overloaded case (0: skip it)")
    p.add_argument("--base", metavar="COMMIT", help="time the multi-turn scenarios and the lane replay against this commit too")
    p.add_argument("--corpus", type=int, default=200, help="trajectories of the lane replay's smaller corpus (0: skip it)")
    p.add_argument("--repeat", type=int, default=3, help="alternating runs of each multi-turn scenario against --base")
    p.add_argument("--no-compiled", dest="compiled", action="store_false",
                   help="skip the compiled build (by default (4) and (6) also time a copy compiled with mypyc)")
    args = p.parse_args()
    simpy_eps = bare_simpy()
    cases = [
        (ROOT / "scenarios/dsv4_flash_multiturn_l1l2.yaml", []),
        (ROOT / "scenarios/mooncake_conversation.yaml",
         ["workload.max_requests=null", "workload.time_scale=1.0", f"cluster.instances={args.instances}",
          "cluster.router=cache_aware"]),
    ]  # fmt: skip
    backends = [("roofline", ["compute.backend=roofline"])]  # named: auto would take the kernels where it could
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        backends.append(("aiconfigurator", ["compute.backend=aiconfigurator", "model.config=deepseek-v4-flash",
                                            "model.expert_dtype=fp8"]))
    runs = [(b, timed_run(path, over + extra)) for path, over in cases for b, extra in backends]
    print(f"bare SimPy: {simpy_eps:,.0f} timeouts/s"
          + ("" if len(backends) > 1 else "  (aiconfigurator backend: aiconfigurator-core not installed, skipped)"))
    print(f"{'run':<30}{'backend':<16}{'requests':>10}{'sim s':>10}{'wall s':>9}{'req/wall s':>12}{'events/s':>12}"
          f"{'vs SimPy':>10}{'vs roofline':>13}")  # fmt: skip
    roof_wall = {}
    for backend, r in runs:
        eps = r["events"] / r["wall_s"]
        roof_wall.setdefault(r["name"], r["wall_s"])
        print(f"{r['name']:<30}{backend:<16}{r['requests']:>10,}{r['simulated_s']:>10,.0f}{r['wall_s']:>9.2f}"
              f"{r['requests'] / r['wall_s']:>12,.0f}{eps:>12,.0f}{eps / simpy_eps:>10.2f}"
              f"{r['wall_s'] / roof_wall[r['name']]:>12.2f}x")  # fmt: skip
    with compiled_tree(args.compiled and bool(args.requests or args.base)) as compiled:
        if args.requests:
            million(args.requests, compiled)
        if args.overload:
            overload(args.overload)
        with base_tree(args.base) as base:
            if args.corpus:
                corpus(args.corpus, base)
            if base:
                against_base(base, args.base, args.repeat, compiled)


if __name__ == "__main__":
    main()
