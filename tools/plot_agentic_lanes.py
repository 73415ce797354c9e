"""The lane sweep's picture: AgentX's throughput, the prefix hit split by tier, and the scheduler's queue.

    hicache-sim sweep scenarios/dsv4_flash_agentic_lanes.yaml --out runs/agentic_lanes \\
        --grid workload.lanes=1,2,4,8,12,16,24,32 --grid hicache.enabled=true,false
    python tools/plot_agentic_lanes.py runs/agentic_lanes --out docs/agentic_lanes.png

Reads the sweep's ``sweep.parquet`` (the ``agentx_*`` columns a lane replay writes) and draws, against the
lanes: tok/s/GPU for L1 only and L1 + L2; the prefix hit of L1 + L2 split into its GPU and CPU tiers beside
L1 only's; and the median #running-req and p90 #queue-req of both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.base.fileio import atomic_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="the sweep folder (or its sweep.parquet)")
    p.add_argument("--out", required=True, help="PNG or SVG to write")
    args = p.parse_args(argv)
    path = Path(args.sweep)
    df = pd.read_parquet(path / "sweep.parquet" if path.is_dir() else path)
    df = df[df["status"] == "ok"].sort_values("workload.lanes")
    on, off = df[df["hicache.enabled"]], df[~df["hicache.enabled"]]

    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    fig = Figure(figsize=(15, 4.2))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    fig.suptitle("DeepSeek-V4-Flash, synthetic AgentX trajectories in aiperf lanes (1 GB of GPU KV = 141K tokens)")
    for part, label, style in ((off, "L1 only", "s--"), (on, "L1 + L2 (4x host)", "o-")):
        ax1.plot(part["workload.lanes"], part["agentx_tok_per_s_per_gpu"], style, label=label)
        ax3.plot(part["workload.lanes"], part["agentx_running_req_p50"], style, label=f"{label}: #running-req p50")
        ax3.plot(part["workload.lanes"], part["agentx_queue_req_p90"], style, alpha=0.5,
                 label=f"{label}: #queue-req p90")  # fmt: skip
    lanes = on["workload.lanes"].to_numpy()
    ax2.fill_between(lanes, 0, on["agentx_gpu_hit"], alpha=0.5, label="L1 + L2: GPU tier")
    ax2.fill_between(lanes, on["agentx_gpu_hit"], on["agentx_prefix_hit"], alpha=0.5, label="L1 + L2: CPU tier")
    ax2.plot(off["workload.lanes"], off["agentx_prefix_hit"], "s--", color="k", label="L1 only")
    ax1.set(title="throughput", ylabel="tok/s/GPU (input + output)", ylim=(0, None))
    ax2.set(title="prefix hit by tier", ylabel="share of input tokens", ylim=(0, 1))
    ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax3.set(title="scheduler", ylabel="requests")
    for ax in (ax1, ax2, ax3):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xticks(sorted(df["workload.lanes"].unique()))
        ax.set_xlabel("lanes (aiperf --concurrency)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    out = Path(args.out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", dpi=110, bbox_inches="tight")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
