"""Pictures for lesson 03: which GPU each rank uses when a job spans several nodes."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch


def plot_nodes_and_gpus(nodes: int = 2, gpus_per_node: int = 2) -> Figure:
    """One box per node, one per GPU inside it, labelled with the RANK and LOCAL_RANK of the
    process that uses it and the device name that process writes: cuda:LOCAL_RANK."""
    fig, ax = plt.subplots(figsize=(3.4 * nodes, 2.6))
    ax.set_xlim(0, 3.4 * nodes)
    ax.set_ylim(0, 2.6)
    ax.axis("off")
    for node in range(nodes):
        x0 = 0.15 + 3.4 * node
        ax.add_patch(FancyBboxPatch((x0, 0.15), 3.1, 2.1, boxstyle="round,pad=0.05",
                                    facecolor="whitesmoke", edgecolor="gray"))
        ax.text(x0 + 1.55, 2.05, f"node {node} (GROUP_RANK={node})", ha="center", fontsize=10, weight="bold")
        for local_rank in range(gpus_per_node):
            rank = node * gpus_per_node + local_rank
            gx = x0 + 0.15 + local_rank * 1.5
            ax.add_patch(FancyBboxPatch((gx, 0.35), 1.3, 1.45, boxstyle="round,pad=0.03",
                                        facecolor="white", edgecolor="tab:green"))
            ax.text(gx + 0.65, 1.08, f"GPU {local_rank}\n\nRANK={rank}\nLOCAL_RANK={local_rank}\n"
                    f"device: cuda:{local_rank}", ha="center", va="center", fontsize=9)
            if rank >= gpus_per_node:
                ax.text(gx + 0.65, 0.45, f"(cuda:{rank}: no such GPU)", ha="center", fontsize=7.5,
                        color="tab:red")
    fig.suptitle("GPUs are numbered per node: a rank's GPU is cuda:LOCAL_RANK, not cuda:RANK", fontsize=10)
    fig.tight_layout()
    return fig


def plot_visible_devices(physical: int = 4, visible: tuple[int, ...] = (2, 3)) -> Figure:
    """One node's physical GPUs (top row, numbered as nvidia-smi numbers them) and what a process
    started with CUDA_VISIBLE_DEVICES listing ``visible`` calls them (bottom row): cuda:0, cuda:1, ...
    in the order listed; the others do not exist for it."""
    fig, ax = plt.subplots(figsize=(1.5 * physical + 2.2, 2.7))
    ax.set_xlim(-2.2, 1.5 * physical)
    ax.set_ylim(0, 2.7)
    ax.axis("off")
    ax.text(-0.1, 2.0, "the machine", ha="right", va="center", fontsize=9)
    ax.text(-0.1, 0.55, "inside the\nprocess", ha="right", va="center", fontsize=9)
    for gpu in range(physical):
        seen = gpu in visible
        ax.add_patch(FancyBboxPatch((1.5 * gpu + 0.1, 1.7), 1.2, 0.6, boxstyle="round,pad=0.03",
                                    facecolor="white", edgecolor="tab:green" if seen else "lightgray"))
        ax.text(1.5 * gpu + 0.7, 2.0, f"GPU {gpu}", ha="center", va="center", fontsize=9,
                color="black" if seen else "gray")
    for index, gpu in enumerate(visible):
        ax.add_patch(FancyBboxPatch((1.5 * index + 0.1, 0.25), 1.2, 0.6, boxstyle="round,pad=0.03",
                                    facecolor="honeydew", edgecolor="tab:green"))
        ax.text(1.5 * index + 0.7, 0.55, f"cuda:{index}", ha="center", va="center", fontsize=9)
        ax.annotate("", xy=(1.5 * index + 0.7, 0.9), xytext=(1.5 * gpu + 0.7, 1.65),
                    arrowprops=dict(arrowstyle="->", color="tab:green"))
    listed = ",".join(map(str, visible))
    fig.suptitle(f"CUDA_VISIBLE_DEVICES={listed}: the process sees {len(visible)} GPUs, numbered from 0 "
                 "in the order listed", fontsize=10)
    fig.tight_layout()
    return fig
