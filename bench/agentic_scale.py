"""AgentX-sized agentic runs: time and peak memory of a lane replay of 393 generated sessions.

    python bench/agentic_scale.py [--lanes 256] [--sessions 393] [--duration 3600] [--hicache on off]

The shape of InferenceX's AgentX runs of DeepSeek-V4-Pro, set up by ``scenario from-sglang`` from a launch and an
aiperf command (``LAUNCH``, ``AIPERF`` below): one B300 TP8 node with DP attention (8 ranks) behind the router's
DP-aware consistent hashing (``--router``; ``cluster.router: consistent_hashing``), ``--lanes``
closed-loop lanes (aiperf's ``--concurrency``) replaying ``--sessions`` generated trajectories at the generator's
defaults (the SemiAnalysis 062126 corpus's size: ~57K parent calls, contexts to ~990K tokens; see
docs/notes/agentic.md), for ``--duration`` seconds of measured phase, HiCache off and on. Each case runs in a
process of its own, so its peak RSS (``ru_maxrss``) is its own; the figures are the simulator's (spec-derived
B300 roofline), printed with the wall time, the requests the lanes sent and AgentX's tok/s/GPU.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


LAUNCH = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention "
          "--enable-hierarchical-cache --hicache-ratio 2")  # fmt: skip
AIPERF = ("aiperf profile --scenario inferencex-agentx-mvp --streaming --concurrency {lanes} --benchmark-duration "
          "{duration} --trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 --warmup-requests-per-lane 1 "
          "--trace-idle-gap-cap-seconds 300 --num-dataset-entries {sessions} "
          "--public-dataset semianalysis_cc_traces_weka_062126")  # fmt: skip


def scenario(lanes: int, sessions: int, duration: float, hicache: bool, router: str = "consistent_hashing") -> dict:
    """The scenario ``scenario from-sglang`` makes of an AgentX launch and aiperf command (no corpus at hand:
    generated sessions with its statistics), HiCache on or off, behind ``router`` (AgentX's sglang-router:
    DP-aware consistent hashing on the session; round_robin: the server's own DP controller)."""
    from sim.app.fromsglang import from_sglang

    launch = LAUNCH if hicache else LAUNCH.replace(" --enable-hierarchical-cache --hicache-ratio 2", "")
    conv = from_sglang(launch, [AIPERF.format(lanes=lanes, duration=duration, sessions=sessions)], gpu="b300")
    return {**conv.scenario, "cluster": {"router": router}}


def one(lanes: int, sessions: int, duration: float, hicache: bool, router: str) -> dict:
    """One case in this process: what it took and what the lanes reported."""
    from sim.app.run import run_scenario
    from sim.app.scenario import scenario_from_dict

    start = time.perf_counter()
    result = run_scenario(scenario_from_dict(scenario(lanes, sessions, duration, hicache, router), source="bench"))
    client, reqs = result.summary["client"], result.summary["requests"]
    return {"case": f"c{lanes} HiCache {'on' if hicache else 'off'}", "wall_s": time.perf_counter() - start,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "sent": reqs["arrived"], "measured": client.get("requests", 0),
            "tok_per_s_per_gpu": client.get("tok_per_s_per_gpu"), "gpu_hit": client.get("gpu_hit"),
            "cpu_hit": client.get("cpu_hit")}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=256)
    ap.add_argument("--sessions", type=int, default=393)
    ap.add_argument("--duration", type=float, default=3600.0, help="measured phase, simulated s")
    ap.add_argument("--hicache", nargs="+", choices=("on", "off"), default=["off", "on"])
    ap.add_argument("--router", choices=("consistent_hashing", "round_robin"), default="consistent_hashing",
                    help="AgentX's sglang-router (DP-aware consistent hashing), or the DP controller's round robin")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one case, JSON out
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.lanes, a.sessions, a.duration, a.hicache == ["on"], a.router)))
        return
    print(f"{a.sessions} generated sessions, {a.lanes} lanes, {a.duration:g} s measured; V4-Pro TP8 DP8 on B300, "
          f"router {a.router}")
    for mode in a.hicache:
        cmd = [sys.executable, __file__, "--one", "--lanes", str(a.lanes), "--sessions", str(a.sessions),
               "--duration", str(a.duration), "--hicache", mode, "--router", a.router]  # fmt: skip
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        tput = f"{r['tok_per_s_per_gpu']:,.0f}" if r["tok_per_s_per_gpu"] is not None else "-"
        hit = f"GPU {r['gpu_hit']:.1%}, CPU {r['cpu_hit']:.1%}" if r["cpu_hit"] is not None else "-"
        print(f"  {r['case']:<18} {r['wall_s']:7.1f} s wall, peak RSS {r['peak_rss_mb']:6.0f} MB; {r['sent']:,} calls "
              f"sent, {r['measured']:,} measured; tok/s/GPU {tput}, hit {hit}")  # fmt: skip


if __name__ == "__main__":
    main()
