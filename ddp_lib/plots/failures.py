"""Lesson 07's picture: a collective only rank 0 calls, against the process group's timeout."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.launch._job import FAILURE_GRACE_S


def hang_timeline(world_size: int = 3, timeout_s: float = 3.0, stop_s: float = FAILURE_GRACE_S) -> Figure:
    """Rank 0 waits in all_reduce until ``timeout_s`` and raises; the launcher waits ``stop_s`` (its
    grace period, to hear from the other ranks) and then stops them (SIGTERM): they were training."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * world_size))
    end = timeout_s + stop_s
    for rank in range(world_size):
        y = world_size - 1 - rank
        if rank == 0:
            ax.barh(y, timeout_s, left=0, color="#fdb462", edgecolor="black")
            ax.text(timeout_s / 2, y, "in all_reduce, waiting for partners", ha="center", va="center")
            ax.plot(timeout_s, y, "rX", markersize=14)
            ax.text(timeout_s + 0.15, y, "raises:\ntimed out", color="red", fontsize=9, va="center")
        else:
            ax.barh(y, end, left=0, color="#8dd3c7", edgecolor="black")
            ax.text(end / 2, y, "training: never calls all_reduce", ha="center", va="center")
            ax.plot(end, y, "ks", markersize=8)
    ax.axvline(timeout_s, color="red", linestyle="--")
    ax.annotate("", xy=(end, -0.6), xytext=(timeout_s, -0.6), arrowprops=dict(arrowstyle="<->"))
    ax.text((timeout_s + end) / 2, -0.85, f"launcher waits {stop_s:g} s, then SIGTERM", ha="center", fontsize=9)
    ax.text(timeout_s - 0.05, -0.85, "process group timeout", color="red", ha="right", fontsize=9)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in reversed(range(world_size))])
    ax.set_xlim(0, end + 0.8)
    ax.set_ylim(-1.0, world_size - 0.4)
    ax.set_xlabel('seconds since rank 0 entered all_reduce (3 s here; default 30 min, or 10 min for backend="nccl")')
    ax.set_title("Evaluation under if rank == 0: waits until the timeout;\n"
                 "then the launcher stops the other ranks (■)")
    fig.tight_layout()
    return fig
