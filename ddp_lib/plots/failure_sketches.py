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


def plot_dead_rank(world_size: int = 3) -> Figure:
    """Every rank all-reduces in a loop; rank 1 is killed; the survivors' collectives break one
    after another as the dead rank's connections, then the failed survivors', close."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * world_size))
    for rank in range(world_size):
        y = world_size - 1 - rank
        if rank == 1:
            ax.barh(y, 3, left=0, color=DEAD, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(3, y, "kX", markersize=14)
            ax.text(3.15, y, "SIGKILL: gone, no exception", va="center", fontsize=9)
        else:
            end = 3.3 if rank == 0 else 4.1
            ax.barh(y, end, left=0, color=SURVIVOR, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(end, y, "rX", markersize=12)
            label = ("one survivor raises at once: connection closed" if rank == 0
                     else "the others soon after, as connections close")
            ax.text(end + 0.15, y, label, color="red", va="center", fontsize=9)
    ax.axvline(3, color="grey", linestyle=":")
    ax.set_xlim(0, 9)
    ax.set_xlabel("time (a sketch: the cell below measures it); at the latest, the group's timeout")
    _lanes(ax, [f"rank {r}" for r in range(world_size)])
    ax.set_title("A rank killed in the middle of a collective: what the others see")
    fig.tight_layout()
    return fig


def plot_loop_collision() -> Figure:
    """Rank 0's metric all_reduce (1 number) meets rank 1's next collective, DDP's bucket-rebuild
    broadcast in step 1's forward: gloo pairs them as one collective, and each rank waits for data
    the other never sends."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3)
    ax.axis("off")
    box(ax, 0.2, 1.9, 2.6, 0.7, "rank 0: step, then\nif rank == 0: metric", SURVIVOR)
    box(ax, 3.4, 1.9, 3.0, 0.7, "all_reduce(metric)\n1 number", WAITING)
    box(ax, 0.2, 0.4, 2.6, 0.7, "rank 1: next step's\nforward, backward", SURVIVOR)
    box(ax, 3.4, 0.4, 3.0, 0.7, "DDP's bucket rebuild:\nbroadcast from rank 0", WAITING)
    arrow(ax, (4.9, 1.9), (4.9, 1.1), "red", "<|-|>")
    ax.text(5.0, 1.5, "paired as the same collective", color="red", fontsize=8, va="center")
    ax.text(6.7, 2.25, "waits for 1 number", fontsize=8, va="center")
    ax.text(6.7, 0.75, "waits for rank 0's data", fontsize=8, va="center")
    ax.set_title("A metric all_reduce on rank 0 alone, inside a DDP training loop", fontsize=10)
    fig.tight_layout()
    return fig


def plot_mismatched_shapes(mine: list[float] = (1.0, 2.0), theirs: list[float] = (10.0, 20.0, 30.0)) -> Figure:
    """Rank 0 all-reduces 2 numbers, rank 1 all-reduces 3: rank 0 sums the first two of rank 1's
    and carries on; rank 1's third number has no partner."""
    fig, ax = plt.subplots(figsize=(8, 2.4))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3)
    ax.axis("off")
    ax.text(0.1, 2.25, "rank 0 sends", fontsize=9, va="center")
    ax.text(0.1, 0.75, "rank 1 sends", fontsize=9, va="center")
    for i, value in enumerate(mine):
        box(ax, 1.6 + i * 1.1, 1.9, 0.9, 0.7, f"{value:g}", SURVIVOR)
    for i, value in enumerate(theirs):
        box(ax, 1.6 + i * 1.1, 0.4, 0.9, 0.7, f"{value:g}", SURVIVOR if i < len(mine) else DEAD)
        if i < len(mine):
            arrow(ax, (2.05 + i * 1.1, 1.1), (2.05 + i * 1.1, 1.9), "black", "<|-|>")
    ax.text(1.6 + len(theirs) * 1.1, 0.75, "no partner", color="red", fontsize=9, va="center")
    sums = ", ".join(f"{a + b:g}" for a, b in zip(mine, theirs))
    ax.text(1.6 + len(mine) * 1.1 + 0.2, 2.25, f"rank 0 gets [{sums}] and carries on: no error", fontsize=9,
            va="center")
    ax.set_title("all_reduce with different shapes: nothing checks that they match", fontsize=10)
    fig.tight_layout()
    return fig
