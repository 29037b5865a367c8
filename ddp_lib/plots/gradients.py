"""Lesson 04 pictures: backward against communication, per rank."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def plot_timeline(timelines: list[dict], title: str = "One DDP backward: gradients ready vs bucket all-reduces"):
    """Draw, per rank, the backward span with the moment each weight's gradient was ready, and
    below it one bar per bucket all-reduce. ``timelines`` are backward_timeline's results in rank order."""
    # A Figure outside pyplot's state: shown once, where the notebook returns it, and never again.
    fig = Figure(figsize=(10, 1 + 1.1 * len(timelines)))
    ax = fig.subplots()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels, ticks = [], []
    for rank, tl in enumerate(timelines):
        y_backward, y_comm = 2 * rank * 1.2 + 1, 2 * rank * 1.2
        ax.barh(y_backward, tl["backward_ms"], left=0, height=0.6, color="lightgray",
                label="backward (until it returns)" if rank == 0 else None)
        ready = [t for _, t in tl["grad_ready"]]
        ax.plot(ready, [y_backward] * len(ready), "k|", markersize=14,
                label="a weight's gradient is ready" if rank == 0 else None)
        for ev in tl["allreduces"]:
            ax.barh(y_comm, ev["end"] - ev["start"], left=ev["start"], height=0.6, alpha=0.8,
                    color=colors[ev["bucket"] % len(colors)], edgecolor="black")
            ax.text(ev["start"], y_comm, f" b{ev['bucket']}", va="center", fontsize=8)
        labels += [f"rank {rank} all-reduce", f"rank {rank} backward"]
        ticks += [y_comm, y_backward]
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("ms since backward() was called (each rank's own clock)")
    ax.set_title(title)
    ax.invert_yaxis()  # rank 0 on top
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    return fig
