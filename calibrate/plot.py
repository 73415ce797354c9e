"""The calibration plot: achieved bandwidth vs item size, one line per backend, the link ceiling drawn across.

For each item size the largest measured count is plotted (the regime a merged transfer runs in); one panel per
direction. Matplotlib runs headless (Agg).
"""

from __future__ import annotations

from pathlib import Path

from sim.base.fileio import atomic_path
from sim.model.costs import CostTable

__all__ = ["plot_bandwidth"]


def plot_bandwidth(table: CostTable, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, op in zip(axes, ("h2d", "d2h"), strict=True):
        by_backend: dict[str, dict[int, tuple[int, float]]] = {}
        for e in table.entries:
            if e.op == op and e.median_s > 0:
                best = by_backend.setdefault(e.backend, {})
                if e.item_bytes not in best or e.n_items > best[e.item_bytes][0]:
                    best[e.item_bytes] = (e.n_items, e.n_items * e.item_bytes / e.median_s / 1e9)
        for backend, points in sorted(by_backend.items()):
            sizes = sorted(points)
            ax.plot(sizes, [points[s][1] for s in sizes], marker="o", label=backend)
            for s in sizes:
                ax.annotate(
                    f"n={points[s][0]}",
                    (s, points[s][1]),
                    fontsize=6,
                    xytext=(2, 2),
                    textcoords="offset points",
                )
        what = "ceiling" if table.source.device != "cpu" else "one large host memcpy (no GPU link)"
        ax.axhline(table.ceilings[op], color="k", linestyle="--", label=f"{what} {table.ceilings[op]:.1f} GB/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("item size (bytes)")
        ax.set_title(op.upper())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("achieved bandwidth (GB/s)")
    fig.suptitle(table.describe(), fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
