"""Lesson 04's pictures of buckets: their layouts, and what overlap saves when communication is slow: a
schematic of two ways of putting buckets on a slow wire, and the measured backward times of each pass;
and the Summary's picture of one rank's whole DDP cycle (construction, forward, backward, step)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.gradients import COMM_COLOURS

WAY_COLOURS = {"no_sync": "lightgray", "overlap": COMM_COLOURS[0], "after_backward": COMM_COLOURS[1]}


def plot_slow_wire_schematic(buckets: int = 4, backward: float = 8.0, delay: float = 2.5) -> Figure:
    """Schematic: backward produces ``buckets`` buckets at even times; each takes ``delay`` on one
    wire. Top, each bucket goes on the wire as soon as it is ready (overlap); bottom, every bucket
    waits for the end of backward. The gap on the right is the time overlap saves."""
    ready = [backward * (b + 1) / buckets for b in range(buckets)]
    overlap, free = [], 0.0
    for t in ready:  # one wire: a bucket starts when it is ready and the wire is free
        start = max(t, free)
        overlap.append(start)
        free = start + delay
    after = [backward + b * delay for b in range(buckets)]
    fig, ax = plt.subplots(figsize=(9, 2.4))
    for row, starts in enumerate((overlap, after)):
        y = 2.2 * row
        ax.barh(y, backward, height=0.6, color="lightgray", edgecolor="black")
        ax.text(backward / 2, y, "backward", ha="center", va="center", fontsize=8)
        for b, start in enumerate(starts):
            ax.barh(y + 0.8, delay, left=start, height=0.5, color=COMM_COLOURS[b % 2], edgecolor="black")
            ax.text(start + delay / 2, y + 0.8, f"b{b}", ha="center", va="center", fontsize=8)
        end = starts[-1] + delay
        ax.axvline(end, ymin=0, ymax=1, color="black", linestyle=":", linewidth=0.8)
        ax.text(end + 0.1, y + 0.2, f"done at {end:g}", fontsize=8)
    ax.set_yticks([0, 0.8, 2.2, 3.0], ["overlap: compute", "wire", "after backward: compute", "wire"])
    ax.set_xlabel("time (arbitrary units)")
    ax.set_title("A slow wire: buckets sent during backward, or after it")
    ax.invert_yaxis()
    ax.set_xlim(0, max(after) + delay + 2.5)
    fig.tight_layout()
    return fig


def plot_slow_wire_times(ms: dict[str, list[float]]) -> Figure:
    """One dot per timed pass of each way (overlap_on_slow_wire's "ms"), and each way's median."""
    fig, ax = plt.subplots(figsize=(9, 2.6))
    for row, (way, times) in enumerate(ms.items()):
        ax.plot(times, [row] * len(times), "o", color=WAY_COLOURS.get(way, "gray"), markeredgecolor="black")
        median = sorted(times)[len(times) // 2]
        ax.plot([median, median], [row - 0.3, row + 0.3], color="black")
    labels = {"no_sync": "backward with no communication", "overlap": "overlap", "after_backward": "after backward"}
    ax.set_yticks(range(len(ms)), [labels.get(way, way) for way in ms])
    ax.set_xlabel("ms from backward() called to backward() returned (bar: median)")
    ax.set_title("Rank 0: each pass of each way")
    ax.set_xlim(left=0)
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_bucket_layouts(layouts: dict[str, list[int]]) -> Figure:
    """One row per setting: its buckets in the order they are sent, each box as wide as its bytes.
    ``layouts`` maps a label to the bucket sizes in bytes (count_allreduces' bytes_in_order_sent)."""
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(layouts)))
    mib = 2**20
    for row, sizes in enumerate(layouts.values()):
        left = 0.0
        for b, nbytes in enumerate(sizes):
            ax.barh(row, nbytes / mib, left=left, height=0.6, color=COMM_COLOURS[b % 2], edgecolor="black")
            ax.text(left + nbytes / mib / 2, row, f"b{b}: {nbytes / mib:.2f} MiB", ha="center", va="center",
                    fontsize=8)
            left += nbytes / mib
    ax.set_yticks(range(len(layouts)), list(layouts))
    ax.set_xlabel("MiB, in the order the buckets are sent (b0 first)")
    ax.set_title("Four 1 MiB layers: the buckets of step 2")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_scratch_ways(params: int = 6, per_bucket: int = 2) -> Figure:
    """Schematic of the three scratch DDPs on one rank: backward produces ``params`` gradients, last
    layer first; after backward, one all-reduce per parameter once backward ends; per-parameter hooks,
    one as each gradient is ready; buckets, one per ``per_bucket`` gradients, as each bucket fills."""
    ready = [1.0 + b for b in range(params)]  # gradient b is ready at the end of its slot
    backward = float(params + 0.2)
    ways = {
        "all-reduce after backward": [(backward + 0.6 * b, 0.5, f"p{b}") for b in range(params)],
        "a hook per parameter": [(t, 0.5, f"p{b}") for b, t in enumerate(ready)],
        "buckets": [(ready[b + per_bucket - 1], 0.9, f"b{b // per_bucket}") for b in range(0, params, per_bucket)],
    }
    fig, ax = plt.subplots(figsize=(9, 2.6))
    for row, boxes in enumerate(ways.values()):
        y = 1.6 * row
        ax.barh(y, backward, height=0.5, color="lightgray", edgecolor="black")
        ax.text(0.2, y, "backward", va="center", fontsize=8)
        for k, (start, length, label) in enumerate(boxes):
            ax.barh(y + 0.6, length, left=start, height=0.45, color=COMM_COLOURS[k % 2], edgecolor="black")
            ax.text(start + length / 2, y + 0.6, label, ha="center", va="center", fontsize=7)
    ax.set_yticks([1.6 * row + 0.3 for row in range(len(ways))], list(ways))
    ax.set_xlabel("time (arbitrary units); p = a parameter's all-reduce, b = a bucket's")
    ax.set_title("When the three scratch DDPs send (one gradient ready per time unit)")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


DDP_CYCLE = (
    ("DDP(model)", "construction", ("check that every rank's shapes match", "broadcast rank 0's parameters",
                                    "  and buffers", "buckets for step 0: by default,", "  one of all parameters"),
     "sections 1, 4"),
    ("ddp_model(x)", "forward", ("broadcast buffers, unless the previous",
                                 "  forward ran in no_grad or no_sync",
                                 "step 1: buckets regrouped in the", "  order backward made gradients",
                                 "inside no_sync(): its backward",
                                 "  will send nothing",
                                 "find_unused_parameters: after it,", "  find the unused ones"),
     "sections 1, 4, 5, 6"),
    ("loss.backward()", "backward", ("gradient ready: x 1/N, into its",
                                     "  bucket (by default)",
                                     "bucket full: its all-reduce starts,", "  buckets in order",
                                     "last bucket started: wait for all,", "  the means land in .grad",
                                     "inside no_sync(): nothing sent",
                                     "a comm hook replaces the all-reduce",
                                     "find_unused_parameters: with the",
                                     "  first gradient, unused ones ready"),
     "sections 2, 4, 5, 6, 7"),
    ("optimizer.step()", "step", ("local: the same mean gradient", "  on the same weights gives", "  the same step"),
     "sections 2, 3"),
)


def _joined(lines: tuple[str, ...]) -> list[str]:
    """The lines of a DDP_CYCLE box with each indented continuation joined to the line before it,
    where the two fit in a wide box's 60 characters."""
    items: list[str] = []
    for text in lines:
        if text.startswith("  ") and items and len(items[-1]) + len(text.strip()) < 60:
            items[-1] += " " + text.strip()
        else:
            items.append(text)
    return items


def plot_ddp_cycle() -> Figure:
    """Schematic of one DDP training step on one rank: construction once, then forward, backward and
    the optimizer step, each box listing what DDP does there and the sections of lesson 04 that show it.
    Two boxes a row, so that each line reads at 9 pt at notebook width: construction and forward on top,
    then the optimizer step and backward below, the cycle running clockwise."""
    width, gap, line = 5.0, 0.8, 0.42
    joined = [_joined(lines) for _, _, lines, _ in DDP_CYCLE]  # a wide box: each item on one line
    height = 1.5 + line * max(len(lines) for lines in joined)  # the longest box's lines fit
    places = ((0, 1), (1, 1), (1, 0), (0, 0))  # (column, row) of construction, forward, backward, step
    fig, ax = plt.subplots(figsize=(11, 0.6 * (2 * height + gap + 0.6)))
    for k, ((call, phase, _, where), lines, (column, row)) in enumerate(zip(DDP_CYCLE, joined, places)):
        left, bottom = column * (width + gap), row * (height + gap)
        colour = "lightgray" if k == 0 else COMM_COLOURS[0] if k == 2 else "white"
        ax.add_patch(plt.Rectangle((left, bottom), width, height, facecolor=colour, edgecolor="black", alpha=0.6))
        top = bottom + height
        ax.text(left + width / 2, top - 0.3, call, ha="center", va="center", fontsize=11, family="monospace",
                weight="bold")
        ax.text(left + width / 2, top - 0.7, phase + (", once" if k == 0 else ", every step"), ha="center",
                va="center", fontsize=10, style="italic")
        for i, text in enumerate(lines):
            ax.text(left + 0.15, top - 1.1 - line * i, text, va="center", fontsize=9)
        ax.text(left + width - 0.15, bottom + 0.25, where, ha="right", va="center", fontsize=9)
    middle = height / 2
    arrow = dict(arrowstyle="->", color="black", lw=1.5)
    top_row = height + gap
    ax.annotate("", xy=(width + gap, top_row + middle), xytext=(width, top_row + middle), arrowprops=arrow)
    ax.annotate("", xy=(width + gap + width / 2, height), xytext=(width + gap + width / 2, top_row), arrowprops=arrow)
    ax.annotate("", xy=(width, middle), xytext=(width + gap, middle), arrowprops=arrow)
    ax.annotate("", xy=(width + gap + 0.4, top_row + 0.2), xytext=(width - 0.4, height - 0.2),
                arrowprops=dict(arrowstyle="->", color="gray", lw=1.5, connectionstyle="arc3,rad=-0.2"))
    ax.text(width + gap / 2 + 0.35, height + gap / 2, "next step", ha="left", va="center", fontsize=9, color="gray")
    ax.set_xlim(-0.1, 2 * width + gap + 0.1)
    ax.set_ylim(-0.1, 2 * height + gap + 0.1)
    ax.axis("off")
    ax.set_title("One rank's DDP, end to end: what each call does, and where this lesson shows it", fontsize=11)
    fig.tight_layout()
    return fig
