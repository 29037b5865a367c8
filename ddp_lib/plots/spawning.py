"""Pictures for lesson 02: start-up time per start method."""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def plot_start_times(times: dict[str, list[float]], nprocs: int = 2) -> Figure:
    """A horizontal bar per start method: median seconds to start and join the processes
    (log scale, each measured launch as a dot)."""
    methods = list(times)
    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * len(methods)))
    medians = [statistics.median(times[m]) for m in methods]
    ax.barh(methods, medians, color="tab:blue", alpha=0.6)
    for y, method in enumerate(methods):
        ax.plot(times[method], [y] * len(times[method]), "k.", markersize=6)
        ax.annotate(f"{medians[y]:.2f} s", (medians[y], y), xytext=(4, 0), textcoords="offset points", va="center")
    ax.set_xscale("log")
    ax.set_xlabel(f"seconds to start {nprocs} processes and join them (log scale)")
    ax.set_ylabel("start method")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig
