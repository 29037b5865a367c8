"""Schematics for lesson 09: DistributedSampler's padded index list split between ranks, and when
DDP's all-reduces can start in the backward of a compiled model, with and without the split into
pieces (optimize_ddp)."""

from __future__ import annotations

import matplotlib.pyplot as plt

RANK_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def plot_padded_indices(n_samples: int = 11, world_size: int = 2):
    """The index list DistributedSampler(shuffle=False) builds: 0 .. n_samples - 1, padded with its
    first indices to a multiple of world_size. Position p goes to rank p % world_size; padding is
    hatched. Returns the Figure."""
    padded = -(-n_samples // world_size) * world_size
    indices = [p % n_samples for p in range(padded)]  # the padding repeats the first indices
    fig, ax = plt.subplots(figsize=(0.55 * padded + 1.5, 1.6))
    for position, index in enumerate(indices):
        rank = position % world_size
        ax.add_patch(plt.Rectangle((position, 0), 0.9, 0.9, facecolor=RANK_COLOURS[rank], alpha=0.6,
                                   hatch="//" if position >= n_samples else None, edgecolor="black"))
        ax.text(position + 0.45, 0.45, str(index), ha="center", va="center", fontsize=10)
        ax.text(position + 0.45, -0.3, str(position), ha="center", va="center", fontsize=7, color="0.4")
    ax.text(-0.2, -0.3, "position", ha="right", va="center", fontsize=7, color="0.4")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=RANK_COLOURS[r], alpha=0.6, edgecolor="black")
               for r in range(world_size)]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", hatch="//", edgecolor="black"))
    ax.legend(handles, [f"rank {r}" for r in range(world_size)] + ["padding (a repeat)"], fontsize="small",
              loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=world_size + 1)
    ax.set_xlim(-1.5, padded + 0.2)
    ax.set_ylim(-0.6, 1.0)
    ax.axis("off")
    ax.set_title(f"{n_samples} samples on {world_size} ranks: the list padded to {padded}, "
                 f"position p to rank p % {world_size}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_compiled_backward(buckets: int = 3):
    """A schematic of one compiled backward, time running right, for a model whose parameters fill
    ``buckets`` DDP buckets. With optimize_ddp=True the graph is cut into one piece per bucket: each
    piece's backward ends with its gradients ready, and that bucket's all-reduce starts while the next
    piece computes. With optimize_ddp=False one graph's backward ends with every gradient at once,
    so every all-reduce waits for it. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(9, 2.6))
    rows = {"optimize_ddp=True\n(pieces)": True, "optimize_ddp=False\n(one graph)": False}
    for row, split in enumerate(rows.values()):
        y = 2.2 - 1.6 * row  # a compute lane above a communication lane
        for b in range(buckets):
            piece = buckets - b  # backward runs from the output back: the last piece first
            start = b * 1.0
            if split:
                ax.add_patch(plt.Rectangle((start, y), 1.0, 0.5, facecolor="0.85", edgecolor="black"))
                ax.text(start + 0.5, y + 0.25, f"backward of piece {piece}", ha="center", va="center", fontsize=7)
                ar_start = start + 1.0
            else:
                ar_start = buckets * 1.0 + b * 0.8
            ax.add_patch(plt.Rectangle((ar_start, y - 0.6), 0.8, 0.5, facecolor="tab:red", alpha=0.7,
                                       edgecolor="black"))
            ax.text(ar_start + 0.4, y - 0.35, f"all-reduce\nbucket {b}", ha="center", va="center", fontsize=7)
        if not split:
            ax.add_patch(plt.Rectangle((0, y), buckets * 1.0, 0.5, facecolor="0.85", edgecolor="black"))
            ax.text(buckets / 2, y + 0.25, "backward of the one graph: every gradient ready only at its end",
                    ha="center", va="center", fontsize=7)
    ax.set_yticks([2.0, 0.4], list(rows))
    ax.set_xlim(0, buckets * 1.8 + 0.3)
    ax.set_ylim(-0.3, 2.9)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic) →")
    ax.set_title("a compiled DDP backward: grey computes, red all-reduces", fontsize=10)
    fig.tight_layout()
    return fig
