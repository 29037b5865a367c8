"""Lesson 02's timeline of a collective in ``finally``: rank 1 raises and waits in the barrier, while
rank 0 waits in backward's all-reduce, so neither collective can end before the group's timeout."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.shapes import box

WAITING, FAILED, DONE = "#fdd9a0", "#f4a6a6", "#cfe8cf"


def plot_collective_in_finally() -> Figure:
    """One row per rank, time to the right: each rank ends up waiting in a different collective."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.set_xlim(0, 10.2)
    ax.set_ylim(-0.45, 2.35)
    ax.axis("off")
    for y, rank in ((1.3, "rank 0"), (0.3, "rank 1")):
        ax.text(0.45, y + 0.25, rank, ha="center", va="center", fontsize=9, weight="bold")
        box(ax, 1.0, y, 1.3, 0.5, "forward", DONE)
    box(ax, 2.45, 1.3, 6.25, 0.5, "backward: all-reduce, waits for rank 1's gradients", WAITING)
    box(ax, 2.45, 0.3, 1.45, 0.5, "raises\nValueError", FAILED)
    box(ax, 4.05, 0.3, 4.65, 0.5, "finally: barrier, waits for rank 0", WAITING)
    ax.axvline(8.85, ymin=0.05, ymax=0.85, color="tab:red", linestyle="--", lw=1.2)
    ax.text(8.95, 0.8, "group's\ntimeout:\ngloo's error,\nnot the\nValueError", ha="left", va="center", fontsize=8,
            color="tab:red")
    ax.text(5.1, 2.2, "a collective in finally: two different collectives, and neither can finish",
            ha="center", va="center", fontsize=9)
    ax.text(5.1, -0.25, "time \u2192 (30 minutes of waiting with the default timeout)", ha="center", va="center",
            fontsize=8, color="dimgray")
    fig.tight_layout()
    return fig
