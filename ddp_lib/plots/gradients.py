"""Lesson 04 pictures: backward against communication, per rank."""

from __future__ import annotations

import matplotlib.pyplot as plt


def plot_timeline(timelines: list[dict], title: str = "One DDP backward: gradients ready vs bucket all-reduces",
                  names: list[str] | None = None):
    """Draw, per rank, the backward span with the moment each weight's gradient was ready, and
    below it one bar per bucket all-reduce. ``timelines`` are backward_timeline's results in rank order;
    ``names`` label the rows instead of "rank 0", "rank 1", ... (e.g. to compare ways of one rank)."""
    names = names or [f"rank {rank}" for rank in range(len(timelines))]
    fig, ax = plt.subplots(figsize=(10, 1 + 1.1 * len(timelines)))
    n_buckets = max((ev["bucket"] + 1 for tl in timelines for ev in tl["allreduces"]), default=1)
    # Up to 8 all-reduces: one colour each, named in the legend. More: a colour scale, so none repeats.
    few = n_buckets <= 8
    cmap = plt.get_cmap("tab10" if few else "viridis")

    def color(bucket: int):
        return cmap(bucket) if few else cmap(bucket / max(1, n_buckets - 1))

    labels, ticks = [], []
    for rank, tl in enumerate(timelines):
        y_backward, y_comm = 2.4 * rank, 2.4 * rank + 1
        ax.barh(y_backward, tl["backward_ms"], left=0, height=0.6, color="lightgray",
                label="backward (until it returns)" if rank == 0 else None)
        ready = [t for _, t in tl["grad_ready"]]
        ax.plot(ready, [y_backward] * len(ready), "k|", markersize=14,
                label="a weight's gradient is ready" if rank == 0 else None)
        n = max(1, len(tl["allreduces"]))
        for ev in tl["allreduces"]:
            # One thin sub-row per bucket, so all-reduces in flight at the same time stay visible.
            y = y_comm - 0.35 + 0.7 * (ev["bucket"] + 0.5) / n
            ax.barh(y, ev["end"] - ev["start"], left=ev["start"], height=0.7 / n, alpha=0.85,
                    color=color(ev["bucket"]), edgecolor="black",
                    label=f"all-reduce {ev['bucket']}" if few and rank == 0 else None)
        labels += [f"{names[rank]}: backward", f"{names[rank]}: all-reduces"]
        ticks += [y_backward, y_comm]
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("ms since backward() was called (each rank's own clock)")
    ax.set_title(title)
    ax.invert_yaxis()  # the first row on top
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    if not few:
        scale = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, n_buckets - 1))
        fig.colorbar(scale, ax=ax, label="all-reduce number (0: sent first)", location="bottom",
                     fraction=0.08, pad=0.35)
    fig.tight_layout()
    return fig
