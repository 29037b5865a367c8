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


# Bytes one rank sends per byte of the full tensor on 2 ranks (lesson 08's ring factors with N = 2).
SEND_FACTOR = {"all-reduce": 1.0, "all-gather": 0.5, "reduce-scatter": 0.5, "broadcast": 0.5}
COLOURS = {"compute": "0.85", "all-reduce": "tab:red", "all-gather": "tab:blue", "reduce-scatter": "tab:green",
           "broadcast": "tab:orange"}


def step_schedules(layers: int = 3) -> dict[str, list[tuple[str, str]]]:
    """What one training step runs under each strategy, in order: (label, kind) per box, kind being
    "compute" or a collective. Each collective carries one layer's weights or gradients, or all of
    them for DDP's all-reduce and ZeRO-1's broadcasts."""
    forward = [(f"F{i}", "compute") for i in range(1, layers + 1)]
    backward = [(f"B{i}", "compute") for i in range(layers, 0, -1)]
    gathered = [box for i in range(1, layers + 1) for box in ((f"AG{i}", "all-gather"), (f"F{i}", "compute"))]
    return {
        "DDP": forward + backward + [("AR", "all-reduce"), ("opt", "compute")],
        "ZeRO-1 (torch)": forward + backward + [("AR", "all-reduce"), ("opt", "compute"), ("BC", "broadcast")],
        "FSDP2": gathered + [box for i in range(layers, 0, -1) for box in
                             ((f"AG{i}", "all-gather"), (f"B{i}", "compute"), (f"RS{i}", "reduce-scatter"))]
                 + [("opt", "compute")],
        "FSDP2, no reshard": gathered + [box for i in range(layers, 0, -1) for box in
                                         ((f"B{i}", "compute"), (f"RS{i}", "reduce-scatter"))] + [("opt", "compute")],
    }


def plot_step_schedules(layers: int = 3):
    """A schematic: one row per strategy, the boxes of one step in order. A collective's width is
    the bytes one rank sends on 2 ranks, in units of one layer's weights; compute boxes have a fixed
    width. The number at the right end of a row sums the collectives' widths. Returns the Figure."""
    schedules = step_schedules(layers)
    fig, ax = plt.subplots(figsize=(11, 0.8 * len(schedules) + 1))
    for row, boxes in enumerate(schedules.values()):
        y, x, sent = len(schedules) - 1 - row, 0.0, 0.0
        for label, kind in boxes:
            whole = label in ("AR", "BC")  # DDP's all-reduce and ZeRO-1's broadcasts carry every layer
            width = 0.6 if kind == "compute" else SEND_FACTOR[kind] * (layers if whole else 1)
            sent += 0 if kind == "compute" else width
            ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, facecolor=COLOURS[kind], edgecolor="black"))
            ax.text(x + width / 2, y, label, ha="center", va="center", fontsize=7)
            x += width
        ax.text(x + 0.2, y, f"sent: {sent:g}", va="center", fontsize=9)
    ax.set_yticks(range(len(schedules)), list(reversed(schedules)))
    ax.set_xlim(0, max(len(b) for b in schedules.values()) * 0.6 + 2)
    ax.set_ylim(-0.6, len(schedules) + 0.2)  # room for the legend above the top row
    ax.set_xticks([])
    ax.set_title(f"one step of {layers} layers on 2 ranks: a collective's width is the bytes a rank sends")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black") for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), fontsize="small", loc="upper right", ncol=5)
    fig.tight_layout()
    return fig
