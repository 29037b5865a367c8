"""Lesson 00's picture: what runs where when a notebook starts a DDP job.

The notebook's kernel calls a launcher; the launcher starts ``world_size`` processes; each
process calls ``init_process_group``, which meets the others through a store (a TCPStore at
MASTER_ADDR:MASTER_PORT) and then builds the process group: direct links between every pair of
ranks, over which the collectives run. Rank 0 serves the store, unless the launcher does.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.collectives import RANK_COLOURS

_BOX = dict(boxstyle="round,pad=0.02,rounding_size=0.08", edgecolor="black", linewidth=1)


def _box(ax, x: float, y: float, w: float, h: float, text: str, colour: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, facecolor=colour, **_BOX))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str = "", **style) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="black", **style))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=8, va="center")


def plot_job_map(world_size: int = 4) -> Figure:
    """Notebook -> launcher -> ``world_size`` rank processes -> store -> process group, top to bottom."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    width = 1.6 * world_size
    _box(ax, width / 2 - 1.4, 4.3, 2.8, 0.55, "notebook (Jupyter kernel)", "#f0f0f0")
    _box(ax, width / 2 - 1.4, 3.3, 2.8, 0.55, "launcher: mp.spawn, ddp_lib, torchrun", "#f0f0f0")
    _arrow(ax, (width / 2, 4.3), (width / 2, 3.85), "spawn(fn, world_size)")
    centres = []
    for rank in range(world_size):
        x = 0.1 + 1.6 * rank
        centres.append(x + 0.7)
        _box(ax, x, 2.1, 1.4, 0.65, f"process\nrank {rank}: fn({rank}, {world_size})", RANK_COLOURS[rank])
        _arrow(ax, (width / 2, 3.3), (x + 0.7, 2.75))
    # env:// makes rank 0 serve the store unless the launcher serves it (torch/distributed/rendezvous.py,
    # _create_c10d_store: TORCHELASTIC_USE_AGENT_STORE, which torchrun and ddp_lib.launch set).
    _box(ax, width / 2 - 1.6, 0.95, 3.2, 0.65,
         "store: TCPStore at MASTER_ADDR:MASTER_PORT\n(served by rank 0, or by the launcher)", "#ffffcc")
    for centre in centres:
        _arrow(ax, (centre, 2.1), (width / 2, 1.6), linestyle="dashed")
    ax.text(width + 0.1, 1.75, "1. every rank registers\n    and reads the others'\n    addresses", fontsize=8,
            va="center")
    # 2. the process group: a link between every pair of ranks (gloo: TCP; nccl: NVLink, InfiniBand)
    y = 0.2
    for i, a in enumerate(centres):
        ax.add_patch(FancyBboxPatch((a - 0.35, y - 0.15), 0.7, 0.3, facecolor=RANK_COLOURS[i], **_BOX))
        ax.text(a, y, f"rank {i}", ha="center", va="center", fontsize=8)
        for b in centres[i + 1:]:
            ax.annotate("", xy=(b - 0.35, y), xytext=(a + 0.35, y),
                        arrowprops=dict(arrowstyle="<->", color="grey", connectionstyle="arc3,rad=0.35"))
    ax.text(width + 0.1, 0.2, "2. process group: ranks\n    talk directly (gloo, nccl);\n    collectives run here",
            fontsize=8, va="center")
    ax.set_xlim(-0.1, width + 2.2)
    ax.set_ylim(-1.1, 5.0)
    ax.axis("off")
    ax.set_title(f"What runs where: one notebook, one launcher, {world_size} processes, one group")
    fig.tight_layout()
    return fig
