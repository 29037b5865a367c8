"""Schematics of the store (lessons 01 and 02): ranks meeting through its keys, and who listens
on MASTER_PORT. Each function draws one pyplot figure and returns it."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.collectives import RANK_COLOURS

_STORE_BOX = dict(boxstyle="round,pad=0.5", facecolor="#f0f0f0", edgecolor="black")


def _rank_box(ax, x: float, y: float, text: str, rank: int) -> None:
    ax.text(x, y, text, ha="center", va="center", fontsize=9, family="monospace",
            bbox=dict(boxstyle="round,pad=0.4", facecolor=RANK_COLOURS[rank % len(RANK_COLOURS)], edgecolor="black"))


def plot_store_exchange(world_size: int = 3) -> Figure:
    """Each rank sets its own key in one store, waits until every rank's key is there, reads them all,
    then adds 1 to a shared counter: the order of ``store_demo``'s calls."""
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.9 * world_size))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.7, world_size - 0.3)
    ax.axis("off")
    middle = (world_size - 1) / 2
    keys = "\n".join(f'hello/{r} = "rank {r} is here"' for r in range(world_size))
    # A store as tall as the column of ranks, so that every arrow runs straight across, clear of the labels.
    ax.add_patch(FancyBboxPatch((6.2, -0.35), 3.0, world_size - 0.3, boxstyle="round,pad=0.1",
                                facecolor="#f0f0f0", edgecolor="black"))
    ax.text(7.7, middle, f"store\n\n{keys}\narrivals = {world_size}", ha="center", va="center",
            family="monospace", fontsize=8.5)
    for rank in range(world_size):
        y = world_size - 1 - rank
        _rank_box(ax, 1.2, y, f"rank {rank}", rank)
        ax.annotate("", xy=(6.1, y + 0.08), xytext=(1.9, y + 0.08),
                    arrowprops=dict(arrowstyle="->", color="black"))
        ax.annotate("", xy=(1.9, y - 0.08), xytext=(6.1, y - 0.08),
                    arrowprops=dict(arrowstyle="->", color="tab:blue", linestyle="--"))
        ax.text(4.0, y + 0.2, f"1. set hello/{rank}", ha="center", fontsize=8)
        ax.text(4.0, y - 0.36, "2. wait, 3. get all, 4. add arrivals", ha="center", fontsize=8, color="tab:blue")
    ax.text(5, -0.6, "the store only holds small keys; tensors later travel between the ranks directly",
            ha="center", fontsize=9)
    fig.tight_layout()
    return fig


def plot_store_port(port: int = 12355) -> Figure:
    """Job A's rank 0 serves the store on a fixed port and its rank 1 connects; job B's rank 0 tries to
    serve on the same port and fails: one port, one listener."""
    fig, ax = plt.subplots(figsize=(8.5, 3.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.3, 3.3)
    ax.axis("off")
    ax.text(5, 3.05, f"MASTER_PORT = {port} on one machine: only one process can listen on a port",
            ha="center", fontsize=9.5)
    ax.text(5, 2.2, f"TCPStore\nlistening on :{port}", ha="center", va="center", fontsize=9, bbox=_STORE_BOX)
    _rank_box(ax, 1.3, 2.2, "job A, rank 0\nserves the store", 0)
    _rank_box(ax, 8.7, 2.2, "job A, rank 1\nconnects", 1)
    ax.annotate("", xy=(3.9, 2.2), xytext=(2.5, 2.2), arrowprops=dict(arrowstyle="->"))
    ax.annotate("", xy=(6.1, 2.2), xytext=(7.6, 2.2), arrowprops=dict(arrowstyle="->"))
    _rank_box(ax, 1.3, 0.6, "job B, rank 0\nwants to serve", 0)
    ax.annotate("", xy=(4.3, 1.75), xytext=(2.5, 0.75), arrowprops=dict(arrowstyle="->", color="tab:red"))
    ax.text(5.6, 0.6, f"listen on :{port}?  taken: EADDRINUSE,\n\"address already in use\"", ha="center",
            va="center", fontsize=9, color="tab:red")
    ax.text(5, -0.15, "under torchrun with a fixed --master-port, the agent serves the store instead of rank 0: "
            "the same clash", ha="center", fontsize=8.5)
    fig.tight_layout()
    return fig
