"""Lesson 07's dead-versus-lost schematic: a killed process on a live host, beside a host that stops
answering. Nothing here is measured."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.failure_sketches import DEAD, SURVIVOR, WAITING, _lanes


def plot_dead_vs_lost(timeout: float = 6.0) -> Figure:
    """Two ranks, twice. Left: rank 1 is killed, its host's kernel closes its connections, and
    rank 0 raises at once. Right: rank 1's host is lost, nobody closes anything, and rank 0 waits
    for the group's timeout."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 2.4), sharey=True)
    for ax, lost in zip(axes, (False, True)):
        ax.barh(1, 3, left=0, color=DEAD, edgecolor="black")
        ax.text(1.5, 1, "all_reduce loop", ha="center", va="center")
        ax.plot(3, 1, "kX", markersize=12)
        end = 3 + timeout if lost else 3.3
        ax.barh(0, 3, left=0, color=SURVIVOR, edgecolor="black")
        ax.barh(0, end - 3, left=3, color=WAITING if lost else SURVIVOR, edgecolor="black")
        ax.plot(end, 0, "rX", markersize=12)
        if lost:
            ax.text(3.35, 1, "host lost: nobody\ncloses, nothing answers", va="center", fontsize=8)
            ax.text(3 + timeout / 2, 0, "waits", ha="center", va="center", fontsize=8)
            ax.text(end - 0.1, -0.55, "raises at the group's timeout", color="red", ha="right", fontsize=8)
            ax.set_title("A lost host", fontsize=10)
        else:
            ax.text(3.35, 1, "killed: its kernel\ncloses its connections", va="center", fontsize=8)
            ax.text(3.4, -0.55, "raises at once: connection closed", color="red", fontsize=8)
            ax.set_title("A dead process on a live host", fontsize=10)
        ax.axvline(3, color="grey", linestyle=":")
        ax.set_xlim(0, 3 + timeout + 0.5)
        ax.set_ylim(-0.9, 1.6)
        ax.set_xlabel("time (a sketch, not measured)")
        _lanes(ax, ["rank 1", "rank 0"])
    fig.tight_layout()
    return fig
