"""AgentX-sized agentic runs: time and peak memory of a lane replay of 393 generated sessions, and what each
scheduler rule changes.

    python bench/agentic_scale.py [--lanes 128 192 256] [--seeds 1 2 3] [--hicache off on] [--duration 3600]
        [--router consistent_hashing|round_robin] [--delayer] [--recipe] [--warmup N] [--warmup-grace S]
        [--csv OUT.csv]
        [--backend auto|aiconfigurator|roofline] [--build-dir DIR | --no-compiled] [--timeout 600]

The shape of InferenceX's AgentX runs of DeepSeek-V4-Pro, set up by ``scenario from-sglang`` from the command
lines alone, no hand edit: the launch (``LAUNCH``: one B300 TP8 node with DP attention, 8 ranks, HiCache at host
ratio 2 or off; ``--delayer`` adds ``--enable-prefill-delayer``; ``--recipe``: InferenceX's published one,
``RECIPE``), aiperf's AgentX command (``AIPERF``: ``--lanes``
closed-loop lanes replaying ``--public-dataset semianalysis_cc_traces_weka_062126`` without a local copy, so
``--sessions`` sessions generated with its statistics, contexts to ~990K tokens; ``--random-seed`` the seed;
the warm-up InferenceX's ``benchmarks/benchmark_lib.sh`` passes, ``--warmup-requests-per-lane 10
--warmup-grace-period 1800``, or ``--warmup N`` and ``--warmup-grace S``, 0 to wait) and the sglang-router command in front of the
server (``ROUTER``: ``--policy consistent_hashing --dp-aware``, or ``round_robin``), for ``--duration`` seconds of
measured phase. Each case runs in a process of its own, so its peak RSS (``VmHWM``) is its own, in a copy of this
tree compiled with mypyc (``sim.base.compiled``; ``--build-dir DIR`` keeps the build for the next invocation,
rebuilt when ``sim/`` changed; ``--no-compiled`` runs pure Python). The figures are the simulator's, on
``--backend`` (``compute.backend``; the default, auto: B300's measured kernels), printed with the wall time, the
calls sent and measured, AgentX's tok/s/GPU, TTFT p50 / p99, the hit rates, the warm-up's end and the lanes'
traffic (calls a lane-hour, ISL / OSL mean, idle gap mean); ``--csv`` appends one row a case.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAUNCH = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention "
          "--enable-hierarchical-cache --hicache-ratio 2")  # fmt: skip
# InferenceX's published launch (SemiAnalysisAI/InferenceX benchmarks/single_node/agentic/dsv4_fp4_b300_sglang.sh
# at 5394707727, DP attention, TP 8, the HiCache backend; its MegaMoE env variables left out: from-sglang ignores
# them), with --max-running-requests 2 x the lanes as the script sets it; HiCache off drops RECIPE_HICACHE.
RECIPE = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention "
          "--ep-size 8 --moe-a2a-backend megamoe --mem-fraction-static 0.85 --swa-full-tokens-ratio 0.075 "
          "--max-running-requests {max_running} --cuda-graph-max-bs-decode 544 --chunked-prefill-size 65536 "
          "--enable-prefill-delayer")  # fmt: skip
RECIPE_HICACHE = (" --enable-hierarchical-cache --hicache-ratio 2 --hicache-write-policy write_back "
                  "--hicache-io-backend direct --hicache-mem-layout page_first_direct")  # fmt: skip
AIPERF = ("aiperf profile --scenario inferencex-agentx-mvp --streaming --concurrency {lanes} --benchmark-duration "
          "{duration} --trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 --warmup-requests-per-lane {warmup} "
          "--trace-idle-gap-cap-seconds 300 --num-dataset-entries {sessions} --random-seed {seed} "
          "--public-dataset semianalysis_cc_traces_weka_062126")  # fmt: skip
ROUTER = ("python -m sglang_router.launch_router --worker-urls http://127.0.0.1:30000 --policy {policy} --dp-aware "
          "--request-id-headers x-correlation-id --host 0.0.0.0 --port 8888")  # fmt: skip
FIELDS = ("lanes", "hicache", "recipe", "router", "delayer", "warmup_grace_s", "seed", "build", "wall_s", "peak_rss_mb", "sent",
          "measured", "tok_per_s_per_gpu", "ttft_p50_s", "ttft_p99_s", "gpu_hit", "cpu_hit", "warmup_s",
          "warmup_failed", "calls_per_lane_hour", "isl_mean", "osl_mean", "idle_gap_mean_s")  # fmt: skip


def commands(lanes: int, sessions: int, duration: float, seed: int, hicache: bool, router: str, delayer: bool,
             warmup_grace: float | None, recipe: bool = False, warmup: int = 10) -> tuple[str, list[str]]:  # fmt: skip
    """The launch and the client commands (aiperf, then the router) of one case, as a user would type them;
    ``recipe``: InferenceX's published launch (``RECIPE``, its prefill delayer on) instead of the minimal one;
    ``warmup`` calls a lane, ``warmup_grace`` s for them (None: wait)."""
    if recipe:
        launch = RECIPE.format(max_running=2 * lanes) + (RECIPE_HICACHE if hicache else "")
    else:
        launch = LAUNCH if hicache else LAUNCH.replace(" --enable-hierarchical-cache --hicache-ratio 2", "")
        launch += " --enable-prefill-delayer" if delayer else ""
    aiperf = AIPERF.format(lanes=lanes, duration=duration, sessions=sessions, seed=seed, warmup=warmup)
    aiperf += f" --warmup-grace-period {warmup_grace:g}" if warmup_grace is not None else ""
    return launch, [aiperf, ROUTER.format(policy=router)]


def one(case: dict) -> dict:
    """One case in this process: what it took and what the lanes reported (TTFT p99 over the measured calls,
    which AgentX's report leaves out)."""
    import numpy as np

    from sim.app.run import run_scenario
    from sim.base.compiled import compiled
    from sim.interop.fromsglang import from_sglang
    from sim.scenario.load import scenario_from_dict

    launch, benches = commands(**{k: v for k, v in case.items() if k != "backend"})
    start = time.perf_counter()
    conv = from_sglang(launch, benches, gpu="b300")
    conv.scenario["compute"] = {**conv.scenario.get("compute", {}), "backend": case.get("backend", "auto")}
    result = run_scenario(scenario_from_dict(conv.scenario, source="bench"))
    client, df = result.summary["client"], result.requests
    ttft = df.loc[df["arrival_s"] >= client["measured_from_s"], "ttft_s"].to_numpy(float)
    status = Path("/proc/self/status").read_text()
    return {"build": "compiled" if compiled() else "pure", "wall_s": time.perf_counter() - start,
            "peak_rss_mb": int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024,
            "sent": result.summary["requests"]["arrived"], "measured": client.get("requests", 0),
            "tok_per_s_per_gpu": client.get("tok_per_s_per_gpu"),
            "ttft_p50_s": client.get("ttft_s", {}).get("p50"),
            "ttft_p99_s": float(np.percentile(ttft, 99)) if len(ttft) else None,
            "gpu_hit": client.get("gpu_hit"), "cpu_hit": client.get("cpu_hit"),
            "warmup_s": client.get("measured_from_s"), "warmup_failed": client.get("warmup_failed", 0),
            "calls_per_lane_hour": client.get("calls_per_lane_hour"), "isl_mean": client.get("isl", {}).get("mean"),
            "osl_mean": client.get("osl", {}).get("mean"),
            "idle_gap_mean_s": client.get("idle_gap_s", {}).get("mean")}  # fmt: skip


def fingerprint(tree: Path) -> str:
    """A digest of ``tree``'s ``sim/`` sources: a kept build is reused only while it matches this tree's."""
    h = hashlib.sha256()
    for p in sorted((tree / "sim").rglob("*.py")):
        h.update(str(p.relative_to(tree)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def compiled_build(build_dir: Path | None) -> Path:
    """A compiled copy of this tree: ``build_dir``'s when it holds one of these sources, else built there (or
    in a temporary folder kept for this invocation)."""
    from sim.base.compiled import build_copy

    dest = build_dir or Path(tempfile.mkdtemp(prefix="agentic-scale-"))
    stamp = dest / "source.sha256"
    if stamp.exists() and stamp.read_text() == fingerprint(ROOT):
        return dest
    if dest.exists() and any(dest.iterdir()):
        subprocess.run(["rm", "-rf", str(dest / "sim")], check=True)
    dest.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    build_copy(ROOT, dest)
    stamp.write_text(fingerprint(ROOT))
    print(f"compiled build in {dest}: {time.perf_counter() - start:.0f} s", flush=True)
    return dest


def run_case(tree: Path, case: dict, timeout: float) -> dict:
    """``case`` in a fresh process importing ``tree``'s ``sim``; a case past ``timeout`` wall seconds is reported
    as such (``wall_s`` the limit, no figures)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, __file__, "--one", json.dumps(case)]
    try:
        out = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"wall_s": timeout, "timed_out": True}
    return json.loads(out.stdout.splitlines()[-1])


def show(case: dict, r: dict) -> str:
    grace = case["warmup_grace"]
    head = (f"c{case['lanes']} HiCache {'on' if case['hicache'] else 'off'} seed {case['seed']} {case['router']}"
            f"{' delayer' if case['delayer'] else ''}{' recipe' if case.get('recipe') else ''}"
            f"{'' if grace is None else f' grace {grace:g} s'}")  # fmt: skip
    if r.get("timed_out"):
        return f"  {head}: not finished in {r['wall_s']:.0f} s wall"
    if r["warmup_failed"]:
        return f"  {head}: {r['wall_s']:.0f} s wall; {r['warmup_failed']} warm-up calls past the grace, run aborted"
    pct = "-" if r["cpu_hit"] is None else f"{r['cpu_hit']:.1%}"
    return (f"  {head}: {r['build']} {r['wall_s']:.0f} s wall, peak RSS {r['peak_rss_mb']:.0f} MB; {r['sent']:,} sent, "
            f"{r['measured']:,} measured; {r['tok_per_s_per_gpu']:,.0f} tok/s/GPU, TTFT p50 {r['ttft_p50_s']:.2f} s "
            f"p99 {r['ttft_p99_s']:.2f} s, hit GPU {r['gpu_hit']:.1%} CPU {pct}; warm-up {r['warmup_s']:.0f} s; "
            f"{r['calls_per_lane_hour']:.0f} calls a lane-hour, ISL {r['isl_mean']:,.0f}, OSL {r['osl_mean']:,.0f}, "
            f"idle gap {r['idle_gap_mean_s']:.1f} s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, nargs="+", default=[128, 192, 256])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="aiperf's --random-seed, one run each")
    ap.add_argument("--sessions", type=int, default=393)
    ap.add_argument("--duration", type=float, default=3600.0, help="measured phase, simulated s")
    ap.add_argument("--hicache", nargs="+", choices=("on", "off"), default=["off", "on"])
    ap.add_argument("--router", choices=("consistent_hashing", "round_robin"), default="consistent_hashing",
                    help="sglang-router's policy: DP-aware consistent hashing (AgentX's) or round robin")
    ap.add_argument("--delayer", action="store_true", help="launch with --enable-prefill-delayer")
    ap.add_argument("--recipe", action="store_true", help="InferenceX's published launch (RECIPE) instead of LAUNCH")
    ap.add_argument("--warmup", type=int, default=10, help="aiperf's --warmup-requests-per-lane (published: 10)")
    ap.add_argument("--warmup-grace", type=float, default=1800.0,
                    help="aiperf's --warmup-grace-period, s (published: 1800; 0: wait for the warm-up)")
    ap.add_argument("--backend", choices=("auto", "aiconfigurator", "roofline"), default="auto",
                    help="compute.backend: what prices the passes (auto: B300's measured kernels)")
    ap.add_argument("--csv", type=Path, help="append one row a case to this CSV")
    ap.add_argument("--build-dir", type=Path, help="keep the compiled build here and reuse it while sim/ is unchanged")
    ap.add_argument("--no-compiled", dest="compiled", action="store_false", help="run this tree, pure Python")
    ap.add_argument("--timeout", type=float, default=600.0, help="wall seconds a case may take")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # a child: one case (JSON), JSON out
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(json.loads(a.one))))
        return
    sys.path.insert(0, str(ROOT))
    tree = compiled_build(a.build_dir) if a.compiled else ROOT
    print(f"{a.sessions} generated sessions, {a.duration:g} s measured; V4-Pro TP8 DP8 on B300 ({tree})", flush=True)
    for lanes in a.lanes:
        for seed in a.seeds:
            for mode in a.hicache:
                case = {"lanes": lanes, "sessions": a.sessions, "duration": a.duration, "seed": seed,
                        "hicache": mode == "on", "router": a.router, "delayer": a.delayer or a.recipe, "recipe": a.recipe,
                        "warmup_grace": a.warmup_grace or None, "warmup": a.warmup, "backend": a.backend}  # fmt: skip
                r = run_case(tree, case, a.timeout)
                print(show(case, r), flush=True)
                if a.csv:
                    new = not a.csv.exists()
                    with a.csv.open("a", newline="") as f:
                        w = csv.DictWriter(f, FIELDS, extrasaction="ignore")
                        if new:
                            w.writeheader()
                        w.writerow({**case, "hicache": mode, "warmup_grace_s": a.warmup_grace or None, **r})


if __name__ == "__main__":
    main()
