"""Lesson 07's schematics, drawn before each run: what a killed rank, a stray collective in a DDP
loop and mismatched shapes do to the other ranks. Nothing here is measured."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.shapes import arrow, box

SURVIVOR, DEAD, WAITING = "#8dd3c7", "#fb8072", "#fdb462"


def _lanes(ax, names: list[str]) -> None:
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def plot_dead_rank(world_size: int = 4) -> Figure:
    """Every rank all-reduces in a loop; rank 1 is killed; every survivor raises well before the group's
    timeout, its connection closed."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * world_size))
    for rank in range(world_size):
        y = world_size - 1 - rank
        if rank == 1:
            ax.barh(y, 3, left=0, color=DEAD, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(3, y, "kX", markersize=14)
            ax.text(3.15, y, "SIGKILL: gone, no exception", va="center", fontsize=9)
        else:
            ax.barh(y, 3.3, left=0, color=SURVIVOR, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(3.3, y, "rX", markersize=12)
            ax.text(3.45, y, "raises well before the timeout: connection closed", color="red", va="center",
                    fontsize=9)
    ax.axvline(3, color="grey", linestyle=":")
    ax.set_xlim(0, 9)
    ax.set_xlabel("time (a sketch: the cell below measures it); at the latest, the group's timeout")
    _lanes(ax, [f"rank {r}" for r in range(world_size)])
    ax.set_title("A rank killed while the others wait in a collective: what they see")
    fig.tight_layout()
    return fig


def plot_loop_collision() -> Figure:
    """Rank 0's metric all_reduce (1 number) meets rank 1's next collective, DDP's bucket-rebuild
    broadcast in step 1's forward. Both are the group's 5th collective, but of different kinds, so gloo
    does not match them: each rank waits for data the other never sends."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3)
    ax.axis("off")
    box(ax, 0.2, 1.9, 2.6, 0.7, "rank 0: step, then\nif rank == 0: metric", SURVIVOR)
    box(ax, 3.4, 1.9, 3.0, 0.7, "all_reduce(metric)\n1 number", WAITING)
    box(ax, 0.2, 0.4, 2.6, 0.7, "rank 1: next step's\nforward", SURVIVOR)
    box(ax, 3.4, 0.4, 3.0, 0.7, "DDP's bucket rebuild:\nbroadcast from rank 0", WAITING)
    arrow(ax, (4.9, 1.9), (4.9, 1.1), "red", "<|-|>")
    ax.text(5.0, 1.5, "same number (5th), different kinds: not matched, each waits", color="red", fontsize=8,
            va="center")
    ax.text(6.7, 2.25, "waits for 1 number", fontsize=8, va="center")
    ax.text(6.7, 0.75, "waits for rank 0's data", fontsize=8, va="center")
    ax.set_title("A metric all_reduce on rank 0 alone, inside a DDP training loop", fontsize=10)
    fig.tight_layout()
    return fig


def plot_mismatched_shapes(longer: list[float] = (1.0, 2.0, 3.0), shorter: list[float] = (10.0, 20.0),
                           shorter_gets: list[float] = (3.0, 11.0)) -> Figure:
    """Rank 0 all-reduces ``longer``, rank 1 ``shorter``. One row per rank, labelled with its tensor.
    A double-headed arrow joins each pair of pieces both ranks have: a message goes each way for it.
    Rank 1 finishes with ``shorter_gets`` (what the lesson's run prints on gloo), not the sums of the
    first numbers. Rank 0's extra boxes have no arrow: rank 0 waits for a piece rank 1 never sends,
    and fails when rank 1 exits."""
    def listed(values) -> str:
        return "[" + ", ".join(f"{value:g}" for value in values) + "]"

    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.set_xlim(0, 11.5)
    ax.set_ylim(0, 3)
    ax.axis("off")
    left = 2.3  # the first box, right of the row labels
    ax.text(0.1, 2.25, f"rank 0: {listed(longer)}", fontsize=9, va="center")
    ax.text(0.1, 0.75, f"rank 1: {listed(shorter)}", fontsize=9, va="center")
    for i, value in enumerate(longer):
        paired = i < len(shorter)
        box(ax, left + i * 1.1, 1.9, 0.9, 0.7, f"{value:g}", SURVIVOR if paired else WAITING)
        if paired:
            arrow(ax, (left + 0.45 + i * 1.1, 1.1), (left + 0.45 + i * 1.1, 1.9), "black", "<|-|>")
    for i, value in enumerate(shorter):
        box(ax, left + i * 1.1, 0.4, 0.9, 0.7, f"{value:g}", SURVIVOR)
    ax.text(left + len(longer) * 1.1, 2.25, "rank 0 waits for a piece rank 1 never sends,\n"
            "and fails when rank 1 exits", color="red", fontsize=8, va="center")
    right = ", ".join(f"{a + b:g}" for a, b in zip(longer, shorter))
    ax.text(left + len(shorter) * 1.1 + 0.2, 0.75, f"rank 1 gets {listed(shorter_gets)}, not [{right}]: "
            "wrong, and no error", fontsize=9, va="center")
    ax.set_title("all_reduce with different shapes: no rank compares them; rank 1's pieces fit", fontsize=10)
    fig.tight_layout()
    return fig


def plot_agent_stops_ranks(failing_rank: int = 1) -> Figure:
    """Under torchrun: ``failing_rank`` (0 or 1) raises and exits; its node's agent sees the exit,
    stops the other rank with SIGTERM, and prints a summary whose root cause is the first failure."""
    other = 1 - failing_rank
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3.2)
    ax.axis("off")
    box(ax, 3.2, 2.2, 3.6, 0.8, "torchrun's agent\nwatches its ranks", "#bebada")
    box(ax, 0.6, 0.3, 2.8, 0.8, f"rank {other}: still working", SURVIVOR)
    box(ax, 6.6, 0.3, 2.8, 0.8, f"rank {failing_rank}: raises\n(@record writes error.json)", DEAD)
    arrow(ax, (7.6, 1.1), (6.2, 2.2), "red")
    ax.text(7.4, 1.7, "1. exits with code 1", color="red", fontsize=8)
    arrow(ax, (3.8, 2.2), (2.2, 1.1), "black")
    ax.text(0.2, 1.7, "2. SIGTERM: exit code -15", fontsize=8)
    ax.text(5.0, 0.05, f"3. the agent prints the summary: root cause = the first failure (rank {failing_rank})",
            ha="center", fontsize=8)
    ax.set_title("A rank that raises under torchrun: what the agent does", fontsize=10)
    fig.tight_layout()
    return fig


def plot_detail_check() -> Figure:
    """What TORCH_DISTRIBUTED_DEBUG=DETAIL adds before each collective: a monitored barrier that
    rank 0 runs, then two all-gathers of the collective's fingerprint, then the collective."""
    fig, ax = plt.subplots(figsize=(9, 2.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 2)
    ax.axis("off")
    steps = [("monitored barrier:\nrank 0 hears from each\nrank, answers each", WAITING),
             ("all_gather:\nthe fingerprint's\nlength", WAITING),
             ("all_gather:\nthe fingerprint\n(op, shapes, dtypes)", WAITING),
             ("the all_reduce\nyou called", SURVIVOR)]
    for i, (text, colour) in enumerate(steps):
        box(ax, 0.2 + i * 3, 0.5, 2.5, 1.1, text, colour)
        if i:
            arrow(ax, (i * 3 - 0.1, 1.05), (0.2 + i * 3, 1.05), "black")
    ax.text(4.6, 0.15, "added by DETAIL: a mismatch or a missing rank raises here", ha="center", fontsize=8)
    ax.set_title("One all_reduce under TORCH_DISTRIBUTED_DEBUG=DETAIL", fontsize=10)
    fig.tight_layout()
    return fig


def plot_unused_parameter() -> Figure:
    """A model whose forward skips one branch: that branch's parameters get no gradient, so their
    bucket is never ready, and the next step finds the last reduction unfinished."""
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 3)
    ax.axis("off")
    box(ax, 0.2, 1.9, 2.6, 0.8, "used branch:\nforward uses it", SURVIVOR)
    box(ax, 0.2, 0.4, 2.6, 0.8, "unused branch:\nforward skips it", DEAD)
    box(ax, 3.8, 1.9, 2.6, 0.8, "gradients arrive:\nready", SURVIVOR)
    box(ax, 3.8, 0.4, 2.6, 0.8, "no gradient:\nnever ready", WAITING)
    arrow(ax, (2.8, 2.3), (3.8, 2.3), "black")
    arrow(ax, (2.8, 0.8), (3.8, 0.8), "grey")
    box(ax, 7.4, 1.1, 4.4, 0.9, "DDP waits for every bucket:\nthe next step raises", WAITING)
    arrow(ax, (6.4, 2.3), (7.4, 1.75), "black")
    arrow(ax, (6.4, 0.8), (7.4, 1.35), "red")
    ax.set_title("A parameter that gets no gradient, under DDP", fontsize=10)
    fig.tight_layout()
    return fig
