"""Prove that a change leaves every output of the command line byte-identical.

``record --tree PATH --out DIR`` runs the ``hicache-sim`` of the tree at PATH (its entry point read from PATH's
``pyproject.toml``, so a regrouped ``sim/`` records as well as the flat one) over every bundled scenario and the
README's commands that need neither ``../shared`` nor a GPU, and keeps each command's files, stdout, stderr and
exit status under ``DIR/NAME/``. ``compare DIR_A DIR_B`` prints ``same`` or ``DIFFERS`` per output, exit 1 on a
difference; ``check --base COMMIT`` records a temporary worktree of COMMIT and this tree and compares them.

Volatile text is normalised at record time, not dropped: the tree's and DIR's absolute paths become ``<TREE>``
and ``<OUT>``, wall-clock figures (``wall time``, ``replayed in``, replay's reading and replaying times, ``wall_s``, ``read_s``,
``replay_s``, compare's seconds column) become ``<T>``, and stderr loses its progress lines (the runs
pass ``--no-progress`` where the command has it; off a terminal the rest print plain ``... elapsed`` lines
only after 30 s). Runs always get ``--out``, so no folder is named by its start time. Parquet files are
compared byte for byte; where the bytes differ, their decoded tables (pyarrow) name the first differing
column and row. No scenario is shrunk: all of them together run in about a minute on two cores; the
whole record takes about two minutes, two commands at a time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

Step = tuple[str, list[str]]  # (output name, CLI arguments); "{out}" is DIR, "{d}" the step's own file folder

_TRACE = "data/mooncake_conversation_trace.jsonl"
_VECTORS = "tests/data/sglang_vectors"
_M2_LAUNCH = ("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 --page-size 64 "
              "--enable-hierarchical-cache --hicache-write-policy write_through --hicache-ratio 2 --hicache-size 0")
_M2_BENCH = ("python3 benchmark/hicache/bench_multiturn.py --disable-random-sample --output-length 16 "
             "--request-length 2048 --num-clients 20 --num-rounds 10 --max-parallel 4 --request-rate 20 "
             "--ready-queue-policy random --disable-auto-run --seed 42")
_C1_LAUNCH = ("python -m sglang.launch_server --trust-remote-code --model-path sgl-project/DeepSeek-V4-Flash-FP8 "
              "--tp 4 --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4")
_C1_BENCH = ("python3 -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len 8192 "
             "--random-output-len 1024 --num-prompts 32 --warmup-requests 64 --flush-cache --max-concurrency {}")
_V4_LAUNCH = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 8 "
              "--enable-hierarchical-cache --hicache-ratio 4")


def _replays() -> list[Step]:
    """The README's replay table (generic and V4-Flash at twice the pages), the boundary policy, page units."""
    steps: list[Step] = []
    for l1, l2 in [(3000, 0), (6000, 12000), (12000, 24000), (None, None)]:
        for model, scale in [("generic", 1), ("deepseek-v4-flash", 2)]:
            caps = [] if l1 is None else ["--l1-pages", str(l1 * scale), "--l2-pages", str(l2 * scale)]
            steps.append((f"replay-{model}-{l1 or 'unbounded'}-{l2 or 0}", ["replay", _TRACE, "--model", model, *caps]))
    for extra, name in [([], "boundary"), (["--granularity", "page"], "boundary-page")]:
        steps.append((f"replay-generic-{name}", ["replay", _TRACE, "--model", "generic", "--l1-pages", "6000",
                                                 "--l2-pages", "3000", "--policy", "boundary", *extra,
                                                 "--json", "{d}/replay.json"]))
    return steps


def _sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def steps(tree: Path) -> list[list[Step]]:
    """Groups of steps: a group runs in order (later steps read earlier outputs), groups run in parallel."""
    scenarios = sorted((tree / "scenarios").glob("*.yaml")) + sorted((tree / "scenarios/validation").glob("*.yaml"))
    groups: list[list[Step]] = [[("plan-quickstart", [
        "plan", "--scenario", "scenarios/quickstart.yaml", "--slo", "ttft_p90=1.5s", "--decode",
        "scenarios/hisparse_quick.yaml", "--out", "{d}", "--workers", "1", "--no-progress"])]]
    plots = {"run-quickstart": [("occupancy", "quickstart"), ("rounds", "quickstart")],
             "run-hisparse_quick": [("misses", "hisparse_quick")]}
    for path in scenarios:
        rel = path.relative_to(tree).as_posix()
        name = "run-" + rel.removeprefix("scenarios/").removesuffix(".yaml").replace("/", "-")
        groups.append([(f"validate-{name[4:]}", ["validate", rel]),
                       (name, ["run", rel, "--out", "{d}", "--no-progress"]),
                       *[(f"plot-{kind}", ["plot", kind, f"{{out}}/run-{run}/files", "--out", f"{{d}}/{kind}.png"])
                         for kind, run in plots.get(name, [])]])
    groups += [[(n, a)] for n, a in _replays()]
    groups += [
        [("compare", ["compare", _TRACE, "--model", "generic", "--policies", "write_through,boundary,clairvoyant",
                      "--l1-pages", "1000,6000,20000", "--l2-pages", "0,0.5x,2x,4x", "--csv", "{d}/compare.csv",
                      "--plot", "{d}/compare.png"])],
        [("seeds-on", ["run", "scenarios/quickstart.yaml", "--seeds", "3", "--workers", "1", "--out", "{d}",
                       "--no-progress"]),
         ("seeds-off", ["run", "scenarios/quickstart.yaml", "--seeds", "3", "--workers", "1", "--out", "{d}",
                        "--set", "hicache.enabled=false", "--no-progress"]),
         ("diff", ["diff", "{out}/seeds-on/files", "{out}/seeds-off/files", "--json", "{d}/diff.json"])],
        # The README's SWA 0.5 multi-turn rows: passes that run the pools dry and retract (no bundled run does).
        [("seeds-multiturn-swa05", ["run", "scenarios/dsv4_flash_multiturn_l1l2.yaml", "--seeds", "5", "--workers",
                                    "1", "--set", "hicache.swa_full_tokens_ratio=0.5", "--out", "{d}",
                                    "--no-progress"])],
        # Overloaded instances, which no bundled run is: a queue of thousands (admission pops its head) and L3
        # lookups retried by the thousand, in queue order, fcfs and lpm.
        [("run-overloaded-l3", ["run", "bench/synthetic_v4_l1l2.yaml", *_sets(
            "workload.num_requests=3000", "workload.rate=30", "hardware.kv_mem_gb=4", "workload.num_prefix_groups=1000",
            "l3.enabled=true", "hicache.prefetch_threshold=256"), "--out", "{d}", "--no-progress"]),
         ("run-overloaded-lpm", ["run", "scenarios/dsv4_flash_l3_two_instances.yaml", *_sets(
             "scheduler.schedule_policy=lpm", "workload.num_clients=512", "workload.max_parallel=100"),
          "--out", "{d}", "--no-progress"])],
        [("sweep", ["sweep", "scenarios/dsv4_flash_l3_two_instances.yaml", "--out", "{d}", "--grid",
                    "hicache.prefetch_threshold=256,4096", "--workers", "1", "--no-progress"]),
         ("plot-threshold", ["plot", "threshold", "{out}/sweep/files", "--out", "{d}/thresholds.png"])],
        [("tree-" + p.stem, ["tree", p.relative_to(tree).as_posix(), "--quiet"])
         for p in sorted((tree / _VECTORS).glob("**/*.jsonl"))],
        [(f"pools-{m}", ["pools", m]) for m in ["generic", "deepseek-v4-flash", "deepseek-v4.1-flash"]],
        [("from-sglang-m2", ["scenario", "from-sglang", "--gpu", "A10", "--launch", _M2_LAUNCH, "--bench", _M2_BENCH,
                             "--sglang-version", "0.5.2", "--out", "{d}/m2.yaml"]),
         ("from-sglang-c1", ["scenario", "from-sglang", "--gpu", "H200", "--launch", _C1_LAUNCH,
                             "--bench", _C1_BENCH.format(1), "--bench", _C1_BENCH.format(16), "--accept-length", "1"]),
         ("from-sglang-v4", ["scenario", "from-sglang", "--gpu", "H200", "--launch", _V4_LAUNCH,
                             "--host-mem-gb", "4096"])],
    ]
    return groups


def entry_point(tree: Path) -> list[str]:
    """``python -c`` calling the tree's ``hicache-sim = "module:func"``."""
    found = re.search(r'^hicache-sim\s*=\s*"([^"]+)"', (tree / "pyproject.toml").read_text(), re.M)
    if found is None:
        raise SystemExit(f"{tree}/pyproject.toml: no hicache-sim entry point under [project.scripts]")
    script = found.group(1)
    module, func = script.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]


_PROGRESS = re.compile(r"^[^\n]*\r[^\n]*\n?|^[^\n]*, \d+ (s|min \d+ s) elapsed[^\n]*\n?", re.M)
_WALL = [  # (pattern, replacement) of each wall-clock figure the commands print
    (re.compile(r"wall time \d+(\.\d+)? s"), "wall time <T> s"),
    (re.compile(r"replayed in [\d.]+ s \([\d,]+ requests/s\)"), "replayed in <T> s (<R> requests/s)"),
    (re.compile(r'"(wall|read|replay)_s": [-\d.e]+'), r'"\1_s": "<T>"'),
    (re.compile(r"reading the trace [\d.]+ s (.*), replaying [\d.]+ s"), r"reading the trace <T> s \1, replaying <T> s"),
]
_SECONDS_COLUMN = re.compile(r"(?m) +\d+\.\d\d$")  # compare's table, headed "seconds"
_WALL_CSV_COLUMN = re.compile(r"(?m)(?<=.),[^,\n]*$")  # compare --csv, last column wall_s


def normalise(text: str, tree: Path, out: Path) -> str:
    for path, label in sorted([(str(tree), "<TREE>"), (str(out), "<OUT>")], key=lambda p: -len(p[0])):
        text = text.replace(path, label)
    for pattern, label in _WALL:
        text = pattern.sub(label, text)
    if " seconds\n" in text:
        text = _SECONDS_COLUMN.sub(" <T>", text)
    if text.startswith("policy,") and text.split("\n", 1)[0].endswith(",wall_s"):
        head, _, body = text.partition("\n")
        text = head + "\n" + _WALL_CSV_COLUMN.sub(",<T>", body)
    return text


_TEXT = {".txt", ".json", ".yaml", ".csv", ".md", ".jsonl", ".svg"}


def run_step(step: Step, tree: Path, out: Path, env: dict[str, str]) -> float:
    """Run one step, keep its normalised stdout, stderr, status and files; return its wall time."""
    name, args = step
    folder = out / name
    files = folder / "files"
    args = [a.replace("{out}", str(out)).replace("{d}", str(files)) for a in args]
    start = time.perf_counter()
    proc = subprocess.run([*entry_point(tree), *args], cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stdout.txt").write_text(normalise(proc.stdout, tree, out))
    (folder / "stderr.txt").write_text(_PROGRESS.sub("", normalise(proc.stderr, tree, out)))
    (folder / "status.txt").write_text(f"{proc.returncode}\n")
    for path in files.rglob("*") if files.exists() else []:
        if path.suffix in _TEXT:
            path.write_text(normalise(path.read_text(), tree, out))
    return wall


def record(tree: Path, out: Path) -> float:
    """Record every step of ``tree`` under ``out`` (two at a time); return the wall time."""
    tree, out = tree.resolve(), out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    start = time.perf_counter()

    def run_group(group: list[Step]) -> None:
        for step in group:
            wall = run_step(step, tree, out, env)
            print(f"{wall:6.1f} s  {step[0]}", flush=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run_group, steps(tree)))
    return time.perf_counter() - start


def _first_difference(a: Path, b: Path) -> str | None:
    """None when ``a`` and ``b`` hold the same bytes, else where they first differ."""
    da, db = a.read_bytes(), b.read_bytes()
    if da == db:
        return None
    if a.suffix == ".parquet":
        return _table_difference(a, b) or "same decoded table, different bytes"
    if a.suffix in _TEXT:
        la, lb = da.decode().splitlines(), db.decode().splitlines()
        for i, (x, y) in enumerate(zip(la, lb), 1):
            if x != y:
                return f"line {i}: {x!r} != {y!r}"
        return f"{len(la)} lines != {len(lb)} lines"
    i = next((i for i, (x, y) in enumerate(zip(da, db)) if x != y), min(len(da), len(db)))
    return f"byte {i} (sizes {len(da)}, {len(db)})"


def _table_difference(a: Path, b: Path) -> str | None:
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    if ta.schema != tb.schema:
        return f"schema {ta.schema.names} != {tb.schema.names}"
    if ta.num_rows != tb.num_rows:
        return f"{ta.num_rows} rows != {tb.num_rows} rows"
    for name in ta.column_names:
        xa, xb = ta.column(name).to_pylist(), tb.column(name).to_pylist()
        row = next((i for i, (x, y) in enumerate(zip(xa, xb)) if x != y), None)
        if row is not None:
            return f"column {name!r} row {row}: {xa[row]!r} != {xb[row]!r}"
    return None


def compare(a: Path, b: Path) -> int:
    """Print one line per output and a count; 1 if any differs."""
    names = sorted({p.relative_to(d).as_posix() for d in (a, b) for p in d.rglob("*") if p.is_file()})
    differ = 0
    for name in names:
        pa, pb = a / name, b / name
        why = "only in B" if not pa.exists() else "only in A" if not pb.exists() else _first_difference(pa, pb)
        differ += why is not None
        print(f"same     {name}" if why is None else f"DIFFERS  {name}: {why}")
    print(f"{len(names)} outputs: {len(names) - differ} same, {differ} differ")
    return 1 if differ else 0


def check(base: str) -> int:
    """Record a temporary worktree of ``base`` and this tree (uncommitted changes included); compare."""
    tree = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="same-outputs-") as tmp:
        worktree = Path(tmp) / "worktree"  # not "base": that is where the base is recorded
        subprocess.run(["git", "-C", str(tree), "worktree", "add", "--detach", str(worktree), base], check=True)
        try:
            for label, path in [("base", worktree), ("this tree", tree)]:
                print(f"recorded {label} in {record(path, Path(tmp) / label.replace(' ', '-')):.0f} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(tree), "worktree", "remove", "--force", str(worktree)], check=True)
        return compare(Path(tmp) / "base", Path(tmp) / "this-tree")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record", help="run every output of the tree at PATH into DIR")
    p.add_argument("--tree", type=Path, default=Path("."), metavar="PATH")
    p.add_argument("--out", type=Path, required=True, metavar="DIR")
    p = sub.add_parser("compare", help="compare two recorded folders; exit 1 on a difference")
    p.add_argument("a", type=Path, metavar="DIR_A")
    p.add_argument("b", type=Path, metavar="DIR_B")
    p = sub.add_parser("check", help="record COMMIT (a temporary worktree) and this tree, and compare")
    p.add_argument("--base", required=True, metavar="COMMIT")
    args = parser.parse_args(argv)
    if args.command == "record":
        print(f"recorded in {record(args.tree, args.out):.0f} s")
        return 0
    if args.command == "compare":
        return compare(args.a, args.b)
    return check(args.base)


if __name__ == "__main__":
    sys.exit(main())
