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
