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


def plot_pickled_worker(module: str = "my_work.lesson02_hello", name: str = "hello", nprocs: int = 2) -> Figure:
    """The parent sends each child the worker as (module, name) from a loop over the ranks; each
    child imports the module and looks the name up before calling fn(i, *args)."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 1.1 * nprocs))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, nprocs - 0.2)
    ax.axis("off")
    box = dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor="tab:blue")
    middle = (nprocs - 1) / 2
    ax.text(1.6, middle, "parent (the notebook)\n\nfor i in range(nprocs):\n  start child i with\n"
            f"  pickle.dumps(fn) =\n  ('{module}', '{name}')",
            ha="center", va="center", multialignment="left", family="monospace", fontsize=8.5, bbox=box)
    for i in range(nprocs):
        y = nprocs - 1 - i
        ax.annotate("", xy=(5.3, y), xytext=(3.4, middle), arrowprops=dict(arrowstyle="->", color="tab:blue"))
        ax.text(4.35, (y + middle) / 2 + 0.12, f"i = {i}", ha="center", fontsize=8.5, color="tab:blue")
        ax.text(7.6, y, f"child {i} (a fresh Python)\nimport {module}\nfn = {module}.{name}\nfn({i}, *args)",
                ha="center", va="center", multialignment="left", family="monospace", fontsize=8.5,
                bbox=dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor="tab:green"))
    ax.text(5, nprocs - 0.45, "a function travels as its module and name, not its code: "
            "each child must be able to import it", ha="center", fontsize=9)
    fig.tight_layout()
    return fig
