"""Lesson 01's sketch of the eight data-moving collectives on 4 ranks, before the measured pictures.

Each square is one piece of a rank's tensor. Its colour is the rank the data came from, as in
``ddp_lib.plots.collectives``; grey is a sum; a hatched square is scratch space; its label names the piece.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ddp_lib.plots.collectives import RANK_COLOURS, SUM_COLOUR

WORLD = 4
OWN = [[(r, "")] for r in range(WORLD)]  # each rank's own tensor, one square
PIECES = [[(r, str(j)) for j in range(WORLD)] for r in range(WORLD)]  # each rank's tensor in 4 pieces
# name: (before, after, note); a square is (origin rank or "sum" or "scratch", label).
SKETCHES = {
    "broadcast": (OWN, [[(0, "")] for _ in range(WORLD)], "rank 0's tensor on every rank"),
    "all_reduce": (OWN, [[("sum", "")] for _ in range(WORLD)], "the sum on every rank"),
    "reduce": (OWN, [[("sum", "")]] + [[("scratch", "")] for _ in range(WORLD - 1)], "the sum on rank 0 only"),
    "all_gather": (OWN, [[(j, "") for j in range(WORLD)] for _ in range(WORLD)], "every tensor on every rank"),
    "gather": (OWN, [[(j, "") for j in range(WORLD)]] + [[] for _ in range(WORLD - 1)], "every tensor on rank 0"),
    "scatter": ([PIECES[0]] + [[] for _ in range(WORLD - 1)], [[(0, str(r))] for r in range(WORLD)],
                "piece r of rank 0's list to rank r"),
    "reduce_scatter": (PIECES, [[("sum", str(r))] for r in range(WORLD)], "the sum of pieces r to rank r"),
    "all_to_all": (PIECES, [[(j, str(r)) for j in range(WORLD)] for r in range(WORLD)],
                   "piece r of every rank to rank r"),
}


def _squares(ax, x0: float, rows: list[list[tuple]]) -> None:
    for y, row in enumerate(rows):
        if not row:
            ax.text(x0 + 0.5, y, "-", ha="center", va="center", color="grey")
        for i, (origin, label) in enumerate(row):
            face = SUM_COLOUR if origin in ("sum", "scratch") else RANK_COLOURS[origin]
            ax.add_patch(Rectangle((x0 + i, y - 0.4), 1, 0.8, facecolor=face, edgecolor="black",
                                   hatch="//" if origin == "scratch" else None,
                                   alpha=0.4 if origin == "scratch" else 1.0))
            ax.text(x0 + i + 0.5, y, label, ha="center", va="center", fontsize=7)


def plot_eight_collectives() -> Figure:
    """The eight collectives on 4 ranks, as a sketch: before on the left, after on the right of each panel."""
    fig, axes = plt.subplots(2, 4, figsize=(12, 4.6))
    for ax, (name, (before, after, note)) in zip(axes.flat, SKETCHES.items()):
        _squares(ax, 0, before)
        ax.annotate("", xy=(5.6, 1.5), xytext=(4.4, 1.5), arrowprops={"arrowstyle": "->"})
        _squares(ax, 6, after)
        ax.set_xlim(-0.2, 10.2)
        ax.set_ylim(WORLD - 0.4, -0.6)
        ax.set_yticks(range(WORLD), [f"rank {r}" for r in range(WORLD)], fontsize=7)
        ax.set_xticks([])
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
        ax.set_title(f"{name}\n{note}", fontsize=8)
    fig.suptitle("A sketch: colour = the rank the data came from; grey = a sum; hatched = scratch; "
                 "a label = a piece", fontsize=9)
    fig.tight_layout()
    return fig
