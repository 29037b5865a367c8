"""Lesson 04 picture of fp16_compress_hook: what it does to one bucket on each rank, drawn like the
lesson's other schematics (one row per rank, one box every rank passes through)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ddp_lib.plots.collectives import RANK_COLOURS, SUM_COLOUR

# (label, face colour) of each step a rank takes alone, before and after the shared all-reduce.
_BEFORE = (("bucket\nfloat32,\n4 bytes each", None), ("cast to\nfloat16,\n2 bytes each", "lavender"),
           ("divide by N\nin float16", "mistyrose"))
_AFTER = (("cast back:\ncopied into the\nfloat32 bucket", None),)


def plot_fp16_hook(world_size: int = 2) -> Figure:
    """Schematic of fp16_compress_hook on ``world_size`` ranks: each rank casts its float32 bucket to
    float16 and divides it by N in float16 (either step can turn a tiny value to 0), one all-reduce sums
    the float16 buckets (half the bytes), and each rank copies the sum back into its float32 bucket."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    step, width = 2.0, 1.7
    allreduce_x = step * len(_BEFORE)
    after_x = allreduce_x + step + 0.3
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.8 * world_size))
    ax.set_xlim(-1.2, after_x + width + 0.1)
    ax.set_ylim(world_size + 0.1, -0.9)
    ax.axis("off")
    for rank in range(world_size):
        own = RANK_COLOURS[rank % len(RANK_COLOURS)]
        ax.text(-0.15, rank, f"rank {rank}", ha="right", va="center", fontsize=9)
        for i, (label, colour) in enumerate(_BEFORE):
            x = step * i
            ax.add_patch(Rectangle((x, rank - 0.35), width, 0.7, facecolor=colour or own, edgecolor="black"))
            ax.text(x + width / 2, rank, label, ha="center", va="center", fontsize=8)
            end = x + step if i < len(_BEFORE) - 1 else allreduce_x
            ax.add_patch(FancyArrowPatch((x + width, rank), (end, rank), arrowstyle="-|>", mutation_scale=10))
        ax.add_patch(FancyArrowPatch((allreduce_x + step, rank), (after_x, rank), arrowstyle="-|>",
                                     mutation_scale=10))
        for label, colour in _AFTER:
            ax.add_patch(Rectangle((after_x, rank - 0.35), width, 0.7, facecolor=colour or SUM_COLOUR,
                                   edgecolor="black"))
            ax.text(after_x + width / 2, rank, label, ha="center", va="center", fontsize=7.5)
    ax.add_patch(Rectangle((allreduce_x, -0.4), step, world_size - 0.2, facecolor=SUM_COLOUR, edgecolor="gray"))
    ax.text(allreduce_x + step / 2, (world_size - 1) / 2, "all-reduce\n(sum)\nof float16:\nhalf the bytes",
            ha="center", va="center", fontsize=8.5)
    # Both float16 steps can flush a tiny value to 0: the cast (below 2**-25) and the division.
    ax.text(step * 1.5 + width / 2, -0.6, "a tiny value can become 0 in either box below", ha="center", fontsize=8,
            color="tab:red")
    fig.suptitle(f"fp16_compress_hook, once per bucket, on {world_size} ranks (N = {world_size})", fontsize=10)
    fig.tight_layout()
    return fig
