"""Schematics for lesson 08, drawn before the measurements they explain: the bytes a ring all-reduce
sends per rank, a DDP step against a local step, 1 rank against 2 on a short step, and lesson 01's Python
ring against gloo's, which sums one half-chunk while it sends the other."""

from __future__ import annotations

import matplotlib.pyplot as plt

from ddp_lib.plots.performance import _lane_bars

COLORS = {"compute": "tab:blue", "copy": "lightgrey", "α": "tab:red", "S / β": "tab:orange",
          "opt.": "tab:green", "Python": "tab:purple", "Py": "tab:purple", "S/N": "tab:orange",
          "S/2N": "tab:orange", "+": "tab:olive", "a": "tab:red"}


def _row(ax, row: int, parts: list[tuple[str, float]], start: float = 0.0, labelled: bool = True) -> float:
    """Draw ``parts`` (label, length) back to back on ``row`` from ``start``; return where they end."""
    for label, length in parts:
        _lane_bars(ax, row, [(start, start + length)], COLORS[label])
        # copies are labelled outside, by the sketch that draws them
        if labelled and length >= 0.45 and label != "copy":
            ax.text(start + length / 2, row, label, ha="center", va="center", fontsize=9)
        start += length
    return start


def _finish(fig, ax, rows: list[str], title: str):
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_xlabel("time")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def draw_busbw_sketch(world_size: int = 4):
    """Schematic: a ring all-reduce of S bytes on N ranks, one row per rank. Each rank sends N - 1
    chunks of S / N in the reduce-scatter, then N - 1 more in the all-gather: its link carries
    2 (N - 1) / N × S bytes, which is why busbw = algbw × 2 (N - 1) / N. Returns the Figure."""
    n = world_size
    fig, ax = plt.subplots(figsize=(9, 0.45 * n + 1.3))
    for rank in range(n):
        for step in range(2 * (n - 1)):
            _lane_bars(ax, rank, [(step, step + 0.9)], "tab:orange" if step < n - 1 else "tab:cyan")
            ax.text(step + 0.45, rank, "S/N", ha="center", va="center", fontsize=8)
        ax.text(2 * (n - 1) + 0.1, rank, f"{2 * (n - 1)} × S/N = {2 * (n - 1) / n:g} × S", va="center", fontsize=9)
    ax.text((n - 1) / 2, -0.7, f"reduce-scatter: {n - 1} sends", ha="center", fontsize=9)
    ax.text(1.5 * (n - 1), -0.7, f"all-gather: {n - 1} sends", ha="center", fontsize=9)
    ax.set_xlim(0, 2 * (n - 1) + 2.5)
    ax.set_ylim(-1.0, n - 0.5)
    return _finish(fig, ax, [f"rank {rank} sends" for rank in range(n)],
                   f"ring all-reduce of S bytes on {n} ranks: each rank's link carries 2(N-1)/N × S")


def draw_ddp_step_sketch(compute: float = 6.0, copy: float = 0.5, alpha: float = 0.6, bytes_time: float = 2.5):
    """Schematic: a local step (compute, optimizer) above one rank's DDP step with one bucket:
    the same compute, with each gradient's copy into the bucket a thin sliver inside it (the copy
    runs in the gradient's autograd hook, during backward), then the all-reduce (α, then the bytes
    over β), the copy back, and the optimizer. Nothing hides the all-reduce. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(9, 2.8))
    _row(ax, 0, [("compute", compute), ("opt.", 0.6)])
    added_from = compute
    slivers = 4  # gradients ready during backward, each copied into the bucket at once
    during = [part for _ in range(slivers) for part in (("compute", compute / slivers), ("copy", copy / slivers))]
    added_to = _row(ax, 1, during + [("α", alpha), ("S / β", bytes_time), ("copy", copy), ("opt.", 0.6)]) - 0.6
    sliver_x = [(i + 1) * compute / slivers + i * copy / slivers + copy / slivers / 2 for i in range(slivers)]
    for x in sliver_x:  # the grey slivers are too thin for a label inside: one label below, an arrow to each
        ax.annotate("", xy=(x, 1.3), xytext=(compute / 2, 1.75), arrowprops={"arrowstyle": "->", "color": "grey"})
    ax.text(compute / 2, 1.8, "grey: each gradient copied into the bucket", ha="center", va="top", fontsize=9)
    ax.annotate("grey: the copy back to p.grad", xy=(added_to - copy / 2, 1.3), xytext=(added_to - 1.0, 1.8),
                ha="left", va="top", fontsize=9, arrowprops={"arrowstyle": "->", "color": "grey"})
    ax.annotate("", xy=(added_from, 0.6), xytext=(added_to, 0.6),
                arrowprops={"arrowstyle": "<->", "color": "black"})
    ax.text(added_to + 0.1, 0.6, "what DDP adds: about α + S / β or more", va="center", fontsize=9)
    ax.set_xlim(0, added_to + 5.5)
    ax.set_ylim(-0.6, 2.1)
    return _finish(fig, ax, ["local step", "DDP step, each rank"],
                   "one bucket: the all-reduce starts when backward is done (a sketch)")


def draw_scaling_sketch(step: float = 1.0, allreduce: float = 0.6):
    """Schematic: 1 rank does two steps of its batch in 2 t; 2 ranks do one each, side by side,
    and each pays one all-reduce a, in t + a. The speed-up is 2 t / (t + a). Returns the Figure."""
    fig, ax = plt.subplots(figsize=(8, 2.2))
    one_end = _row(ax, 0, [("compute", step), ("compute", step)])
    for rank in (1, 2):
        two_end = _row(ax, rank, [("compute", step), ("a", allreduce)])
    ax.text(one_end + 0.05, 0, "2 t", va="center", fontsize=9)
    ax.text(two_end + 0.05, 2, "t + a", va="center", fontsize=9)
    ax.set_xlim(0, one_end * 1.12)
    return _finish(fig, ax, ["1 rank, 2 batches", "rank 0 of 2", "rank 1 of 2"],
                   f"two batches: speed-up 2t / (t + a) = {2 * step / (step + allreduce):.2f} "
                   "with illustrative t and a, the all-reduce (a sketch)")


def draw_ring_vs_gloo(world_size: int = 4, python: float = 0.8, transfer: float = 1.0, add: float = 0.5):
    """Schematic of one rank ("Py": time in Python, "+": a sum): lesson 01's ring makes a Python call (isend,
    recv, wait) at each of its 2 (N - 1) steps, each sending S / N bytes, and in the reduce-scatter adds the
    received chunk only after it arrived. gloo's all-reduce is one Python call, then its C++ loop sends the
    same bytes as 4 (N - 1) messages of S / 2N (a tensor below 2N MiB, every segment holding data), and sums
    each received half-chunk while the next one is in flight. Returns the Figure."""
    steps, messages = 2 * (world_size - 1), 4 * (world_size - 1)
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ring_parts = []
    for step in range(steps):
        ring_parts += [("Py", python), ("S/N", transfer)] + ([("+", add)] if step < world_size - 1 else [])
    ring_end = _row(ax, 0, ring_parts)
    start = _row(ax, 1, [("Py", python)])
    gloo_end = _row(ax, 1, [("S/2N", transfer / 2)] * messages, start, labelled=False)
    for message in range(1, messages // 2 + 1):  # reduce-scatter: sum the half-chunk received, the next in flight
        _row(ax, 2, [("+", add / 2)], start + message * transfer / 2, labelled=False)
    ax.text(ring_end + 0.2, 0, f"{steps} Python calls, {steps} messages of S/N", va="center", fontsize=9)
    ax.text(gloo_end + 0.2, 1, f"1 Python call, {messages} of S/2N", va="center", fontsize=9)
    ax.text(gloo_end + 0.2, 2, "each sum while the next half-chunk is sent", va="center", fontsize=9)
    ax.set_xlim(0, ring_end * 1.45)
    return _finish(fig, ax, ["lesson 01's ring", "gloo: sends", "gloo: sums (+)"],
                   f"one of {world_size} ranks: the ring adds after each wait;\n"
                   "gloo sums one half-chunk while it sends the other (a sketch)")
