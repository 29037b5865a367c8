"""Pictures for lesson 05: loss curves of several runs on one plot."""

from __future__ import annotations

import matplotlib.pyplot as plt


def plot_loss_curves(curves: dict[str, list[float]], title: str = "training loss", ax=None):
    """One line per run: ``curves`` maps a label (e.g. "2 ranks") to its per-epoch losses.
    Returns the matplotlib Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.5))
    for label, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, marker="o", markersize=3, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (mean over all ranks' samples)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


def plot_loss_panels(panels: dict[str, dict[str, list[float]]]):
    """Several loss-curve plots side by side, one per entry of ``panels`` (title -> curves),
    sharing the loss axis. Returns the Figure."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), sharey=True)
    for ax, (title, curves) in zip(list(axes) if len(panels) > 1 else [axes], panels.items()):
        plot_loss_curves(curves, title, ax)
    fig.tight_layout()
    return fig


def plot_moons(dataset, title: str = "the generated dataset"):
    """Scatter the 2-D samples of ``dataset`` (a TensorDataset of x, y), one colour per class.
    Returns the matplotlib Axes."""
    x, y = dataset.tensors
    _, ax = plt.subplots(figsize=(4.5, 3))
    for label in (0, 1):
        points = x[y == label]
        ax.scatter(points[:, 0], points[:, 1], s=6, label=f"class {label}")
    ax.set_xlabel("x[0]")
    ax.set_ylabel("x[1]")
    ax.set_title(title)
    ax.legend()
    return ax


def plot_sampler_shards(permutation: list[int], world_size: int):
    """Schematic of DistributedSampler: the epoch's permutation on top, padded to a multiple of
    ``world_size`` by repeating its start (hatched), and below it each rank's row, which takes every
    ``world_size``-th position starting at its rank."""
    padded = permutation + permutation[:(-len(permutation)) % world_size]
    fig, ax = plt.subplots(figsize=(7, 1.1 + 0.45 * world_size))
    rows = [("permutation", list(enumerate(padded)))]
    rows += [(f"rank {r}", [(p, padded[p]) for p in range(r, len(padded), world_size)]) for r in range(world_size)]
    for row, (label, cells) in enumerate(rows):
        y = -row * 0.6 - (0.3 if row else 0)
        ax.text(-0.3, y + 0.2, label, ha="right", va="center")
        for slot, (position, sample) in enumerate(cells):
            x = position if row == 0 else slot * world_size + (row - 1)  # under its place in the permutation
            pad = position >= len(permutation)
            ax.add_patch(plt.Rectangle((x, y), 0.9, 0.4, facecolor=f"C{position % world_size}", alpha=0.35,
                                       hatch="//" if pad else None, edgecolor="black"))
            ax.text(x + 0.45, y + 0.2, str(sample), ha="center", va="center")
    ax.set_xlim(-2.2, len(padded) + 0.2)
    ax.set_ylim(-0.6 * world_size - 0.5, 0.6)
    ax.axis("off")
    ax.set_title(f"DistributedSampler: {len(permutation)} samples on {world_size} ranks "
                 f"(hatched: padding, read twice)")
    return fig
