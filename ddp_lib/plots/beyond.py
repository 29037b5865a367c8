"""Pictures for lesson 10: memory per rank as stacked bars, one bar per strategy (a part missing
from a bar counts as zero)."""

from __future__ import annotations

import matplotlib.pyplot as plt

# "kept from forward": what the forward adds and holds until backward. That is activations under
# DDP, but mostly the unsharded weights under FSDP2 with reshard_after_forward=False.
PARTS = ("parameters", "gradients", "optimizer state", "other buffers", "kept from forward")


def plot_memory_bars(panels: dict[str, dict[str, dict[str, int]]]):
    """One panel per entry of ``panels`` (title -> {bar label -> {part -> bytes}}), each bar stacked
    from the parts in PARTS, in MB. Returns the Figure."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.5), sharey=True, squeeze=False)
    for ax, (title, bars) in zip(axes[0], panels.items()):
        labels = list(bars)
        bottom = [0.0] * len(labels)
        for part in PARTS:
            heights = [bars[label].get(part, 0) / 1e6 for label in labels]
            ax.bar(labels, heights, bottom=bottom, label=part)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_title(title)
        ax.set_xlabel("strategy")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("MB held by rank 0")
    axes[0][-1].legend(fontsize="small")
    fig.tight_layout()
    return fig
