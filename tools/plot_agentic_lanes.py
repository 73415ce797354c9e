"""The lane sweep's picture: AgentX's throughput, the prefix hit split by tier, and the scheduler's queue.

    hicache-sim sweep scenarios/dsv4_flash_agentic_lanes.yaml --out runs/agentic_lanes \\
        --grid workload.lanes=1,2,4,8,12,16,24,32 --grid hicache.enabled=true,false
    python tools/plot_agentic_lanes.py runs/agentic_lanes --out docs/agentic_lanes.png

Reads the sweep's ``sweep.parquet`` (the ``agentx_*`` columns a lane replay writes) and draws, against the
lanes: tok/s/GPU for L1 only and L1 + L2; the prefix hit of L1 + L2 split into its GPU and CPU tiers beside
L1 only's; and the median #running-req and p90 #queue-req of both. The plotted columns go beside the picture
as a CSV, from which the tool (and ``tests/tools/test_plot_agentic_lanes.py``) can draw it again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.base.fileio import atomic_path  # noqa: E402

COLUMNS = ["workload.lanes", "hicache.enabled", "agentx_tok_per_s_per_gpu", "agentx_gpu_hit", "agentx_prefix_hit",
           "agentx_running_req_p50", "agentx_queue_req_p90"]  # fmt: skip
# One colour per setup in every panel (L1 only, L1 + L2), and two others for the tiers of L1 + L2's hit.
L1, L1L2, GPU_TIER, CPU_TIER = "C0", "C1", "C2", "C4"


def draw(df: pd.DataFrame):
    """The figure, from the sweep's rows (``COLUMNS``; ``ok`` rows only)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, ScalarFormatter

    df = df.sort_values("workload.lanes")
    on, off = df[df["hicache.enabled"]], df[~df["hicache.enabled"]]
    fig = Figure(figsize=(15, 4.8), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, sharex=True)
    fig.suptitle("DeepSeek-V4-Flash, synthetic AgentX trajectories in aiperf lanes (1 GB of GPU KV = 141K tokens)")
    for part, label, color, marker in ((off, "L1 only", L1, "s"), (on, "L1 + L2 (4x host)", L1L2, "o")):
        ax1.plot(part["workload.lanes"], part["agentx_tok_per_s_per_gpu"], marker + "-", color=color, label=label)
        ax3.plot(part["workload.lanes"], part["agentx_running_req_p50"], marker + "-", color=color,
                 label=f"{label}: #running-req p50")  # fmt: skip
        ax3.plot(part["workload.lanes"], part["agentx_queue_req_p90"], marker + ":", color=color, mfc="none",
                 label=f"{label}: #queue-req p90")  # fmt: skip
    lanes = on["workload.lanes"].to_numpy()
    ax2.fill_between(lanes, 0, on["agentx_gpu_hit"], color=GPU_TIER, alpha=0.45, label="L1 + L2: GPU tier")
    ax2.fill_between(lanes, on["agentx_gpu_hit"], on["agentx_prefix_hit"], color=CPU_TIER, alpha=0.35,
                     label="L1 + L2: CPU tier")  # fmt: skip
    ax2.plot(off["workload.lanes"], off["agentx_prefix_hit"], "s-", color=L1, label="L1 only")
    ax1.set(title="throughput", ylabel="tok/s/GPU (input + output)", ylim=(0, None))
    ax2.set(title="prefix hit by tier", ylabel="share of input tokens", ylim=(0, 1))
    ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax3.set(title="scheduler", ylabel="requests", ylim=(0, None))
    for ax in (ax1, ax2, ax3):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.set_xticks(sorted(df["workload.lanes"].unique()))
        ax.set_xlabel("lanes (aiperf --concurrency)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=2)  # below the data
    return fig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", help="the sweep folder (or its sweep.parquet, or the CSV this tool writes)")
    p.add_argument("--out", required=True, help="PNG or SVG to write; its data goes beside it as .csv")
    args = p.parse_args(argv)
    path = Path(args.sweep)
    if path.suffix == ".csv":
        df = pd.read_csv(path)
    else:
        df = pd.read_parquet(path / "sweep.parquet" if path.is_dir() else path)
        df = df[df["status"] == "ok"][COLUMNS]
    fig = draw(df)
    out = Path(args.out)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format=out.suffix.lstrip(".") or "png", dpi=110)
    with atomic_path(out.with_suffix(".csv")) as tmp:
        df.to_csv(tmp, index=False)
    print(f"wrote {out} and {out.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
