"""Picture for the cluster lab: the two hosts made of network namespaces, and who reaches whom."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.shapes import arrow, box


def plot_two_hosts(subnet: str = "10.200.0", rdzv_port: int = 29400) -> Figure:
    """Two hosts (network namespaces) joined by a veth pair: each with its own loopback and eth0
    address, node0's agent running the rendezvous store on ``rdzv_port`` and the ranks' store,
    node1's agent and rank reaching them by node0's address, and gloo between the ranks."""
    fig, ax = plt.subplots(figsize=(9, 4.4))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5.6)
    ax.axis("off")
    for node, x0 in enumerate((0.2, 5.6)):
        ax.add_patch(FancyBboxPatch((x0, 0.2), 4.2, 4.9, boxstyle="round,pad=0.02", facecolor="#f7f7f7",
                                    edgecolor="grey", linestyle="--"))
        ax.text(x0 + 0.1, 4.95, f"node{node}: a network namespace", fontsize=9, weight="bold", va="top")
        ax.text(x0 + 0.1, 4.6, f"eth0 {subnet}.{node + 1}   lo 127.0.0.1 (its own)", fontsize=8, va="top")
        box(ax, x0 + 0.3, 3.0, 1.7, 0.8, f"agent (torchrun)\nnode{node}", "#fde9c9")
        box(ax, x0 + 0.3, 0.5, 1.7, 0.8, f"rank {node}\n(gloo on eth0)", "#cfe2f3")
        arrow(ax, (x0 + 1.15, 3.0), (x0 + 1.15, 1.3), "#b07000")  # the agent starts its rank
    box(ax, 2.5, 3.4, 1.8, 0.9, f"rendezvous store\n:{rdzv_port}", "#d9ead3")
    box(ax, 2.5, 1.9, 1.8, 0.9, "ranks' store\nMASTER_PORT", "#d9ead3")
    arrow(ax, (2.0, 3.5), (2.5, 3.8), "green", "<|-|>")  # node0's agent runs both stores
    arrow(ax, (2.0, 3.1), (2.5, 2.4), "green", "<|-|>")
    arrow(ax, (5.9, 3.5), (4.3, 3.85), "green", "<|-|>")
    ax.text(5.1, 4.0, f"node0:{rdzv_port}", fontsize=7, color="green", ha="center")
    arrow(ax, (1.5, 1.3), (2.9, 1.9), "tab:blue")  # each rank reaches the ranks' store
    arrow(ax, (6.4, 1.3), (4.0, 2.0), "tab:blue")
    arrow(ax, (2.0, 0.8), (5.9, 0.8), "purple", "<|-|>")
    ax.text(3.95, 0.45, "gloo: ports picked at run time", fontsize=7, color="purple", ha="center")
    ax.plot([4.4, 5.6], [0.25, 0.25], color="black", lw=3)
    ax.text(5.0, 0.05, "veth pair (the cable)", fontsize=7, ha="center")
    ax.set_title("Two hosts on one machine: every connection between them goes over eth0 and the cable;\n"
                 "127.0.0.1 on node1 is node1 itself", fontsize=10)
    fig.tight_layout()
    return fig
