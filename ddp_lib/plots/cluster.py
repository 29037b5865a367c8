"""Picture for the cluster lab: the two hosts made of network namespaces, and who reaches whom."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.shapes import arrow, box


def plot_two_hosts(subnet: str = "10.200.0", rdzv_port: int = 29400) -> Figure:
    """Two hosts (network namespaces) joined by a veth pair: each with its own loopback and eth0
    address and a torchrun that starts one rank, node1's torchrun reaching node0's at ``rdzv_port``
    by node0's name, and gloo between the ranks. The stores come later (``plot_what_listens_where``),
    once the lesson has defined them."""
    fig, ax = plt.subplots(figsize=(9, 4.4))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5.6)
    ax.axis("off")
    for node, x0 in enumerate((0.2, 5.6)):
        ax.add_patch(FancyBboxPatch((x0, 0.2), 4.2, 4.9, boxstyle="round,pad=0.02", facecolor="#f7f7f7",
                                    edgecolor="grey", linestyle="--"))
        ax.text(x0 + 0.1, 4.95, f"node{node}: a network namespace", fontsize=9, weight="bold", va="top")
        ax.text(x0 + 0.1, 4.6, f"eth0 {subnet}.{node + 1}   lo 127.0.0.1 (its own)", fontsize=8, va="top")
        box(ax, x0 + 0.3, 3.0, 1.7, 0.8, f"torchrun\nnode{node}", "#fde9c9")
        box(ax, x0 + 0.3, 0.5, 1.7, 0.8, f"rank {node}\n(gloo on eth0)", "#cfe2f3")
        arrow(ax, (x0 + 1.15, 3.0), (x0 + 1.15, 1.3), "#b07000")  # torchrun starts its rank
    arrow(ax, (5.9, 3.4), (2.2, 3.4), "green")  # node1's torchrun dials node0's
    ax.text(3.95, 3.55, f"--rdzv-endpoint=node0:{rdzv_port}", fontsize=7, color="green", ha="center")
    arrow(ax, (2.0, 0.8), (5.9, 0.8), "purple", "<|-|>")
    ax.text(3.95, 0.45, "gloo: ports picked at run time", fontsize=7, color="purple", ha="center")
    ax.plot([4.4, 5.6], [0.25, 0.25], color="black", lw=3)
    ax.text(5.0, 0.05, "veth pair (the cable)", fontsize=7, ha="center")
    ax.set_title("Two hosts on one machine: every connection between them goes over eth0 and the cable;\n"
                 "127.0.0.1 on node1 is node1 itself", fontsize=10)
    fig.tight_layout()
    return fig


def plot_first_mistakes(subnet: str = "10.200.0", rdzv_port: int = 29400) -> Figure:
    """Two of the lab's mistakes side by side, as a sketch: left, node1 given 127.0.0.1 as the
    rendezvous endpoint dials its own loopback and hosts a store of its own; right, gloo bound to
    loopback tells the other host an address it cannot reach: one rank listens, the other dials and is
    refused (gloo picks which from the pair's ports; the sketch shows rank 1 dialling)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax in axes:
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 4)
        ax.axis("off")
    left, right = axes
    box(left, 0.3, 2.2, 4.0, 1.2, f"node0 ({subnet}.1)\nstore on :{rdzv_port}\nwaits for a 2nd node", "#8dd3c7")
    box(left, 5.7, 2.2, 4.0, 1.2, f"node1 ({subnet}.2)\nits own store on :{rdzv_port}\nwaits for a 2nd node", "#fb8072")
    for x, colour, label in ((2.3, "black", "--rdzv-endpoint=node0:\nits own store"),
                             (7.7, "red", "--rdzv-endpoint=127.0.0.1:\nits own loopback, its own store")):
        # each agent dials its endpoint and arrives back at the store in its own box
        left.annotate("", xy=(x + 0.8, 2.2), xytext=(x - 0.8, 2.2),
                      arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.2, connectionstyle="arc3,rad=1.2"))
        left.text(x, 1.35, label, ha="center", va="top", fontsize=8, color=colour)
    left.text(5.0, 2.8, "node1\nnever\ndials\nnode0", ha="center", va="center", fontsize=7, color="grey")
    left.set_title("endpoint 127.0.0.1 on node1: two rendezvous, both time out", fontsize=9)
    box(right, 0.3, 2.2, 4.0, 1.2, "rank 0 on node0\nlistens on 127.0.0.1:PORT\n(GLOO_SOCKET_IFNAME=lo)", "#fdb462")
    box(right, 5.7, 2.2, 4.0, 1.2, "rank 1 on node1\ndials 127.0.0.1: refused\n(GLOO_SOCKET_IFNAME=lo)", "#fdb462")
    # the call goes to node1's own loopback and never reaches node0: an arrow that stops, crossed out
    right.annotate("", xy=(4.6, 2.8), xytext=(5.7, 2.8), arrowprops=dict(arrowstyle="-|>", color="red", lw=1.2))
    right.text(4.45, 2.8, "X", ha="center", va="center", fontsize=12, color="red", fontweight="bold")
    right.text(5.0, 1.8, "rank 1 dials 127.0.0.1, the address rank 0 announced:\nits own loopback, where rank 0 "
               "is not. The pair's\nports decide which rank dials; it can be the other way",
               ha="center", va="top", fontsize=8, color="red")
    right.set_title("gloo on loopback: the rendezvous works, connectFullMesh fails", fontsize=9)
    fig.tight_layout()
    return fig
