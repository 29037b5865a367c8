"""Sketches for the cluster lab: a closed rendezvous port, mismatched ``--nnodes``, and what each
process of a two-host torchrun job listens on."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.shapes import arrow, box

AGENT, STORE, RANK, FAILED = "#fde9c9", "#d9ead3", "#cfe2f3", "#fb8072"


def plot_closed_port(rdzv_port: int = 29400) -> Figure:
    """node1's agent dials node0's rendezvous port, which a firewall on node0 drops: node1 times out
    connecting (read_timeout), node0 waits alone until its join deadline (join_timeout)."""
    fig, ax = plt.subplots(figsize=(9, 3.0))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3.8)
    ax.axis("off")
    box(ax, 0.3, 1.6, 3.0, 1.0, f"node0's agent\nrendezvous store on :{rdzv_port}", AGENT)
    box(ax, 6.7, 1.6, 3.0, 1.0, f"node1's agent\n--rdzv-endpoint=node0:{rdzv_port}", AGENT)
    ax.plot([4.6, 4.6], [1.3, 2.9], color="black", lw=5)
    ax.text(4.6, 3.0, "firewall on node0:\ndrops packets to the port", ha="center", va="bottom", fontsize=8)
    arrow(ax, (6.7, 2.1), (4.75, 2.1), "red")
    ax.text(5.7, 2.25, "dials", fontsize=8, color="red", ha="center")
    ax.text(8.2, 1.3, "no answer: DistNetworkError\nafter read_timeout", ha="center", va="top", fontsize=8, color="red")
    ax.text(1.8, 1.3, "alone at the rendezvous:\nRendezvousTimeoutError after join_timeout", ha="center", va="top",
            fontsize=8, color="red")
    ax.set_title("A closed rendezvous port: the nodes never meet, and both fail after a timeout", fontsize=10)
    fig.tight_layout()
    return fig


def plot_nnodes_mismatch() -> Figure:
    """Two nodes given different ``--nnodes``, in both orders. A node that joins closes the round when
    the participants reach its own count: 3 then 2 closes a round of 2. In 2 then 3, node1's count is
    not reached; node0, which joined first, checks on every poll but closes a round only after a
    last-call deadline, and none was set (the count never equalled the joining node's ``min_nodes``):
    node0 times out, and node1 finds the rendezvous closed or its store gone."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.0))
    cases = [(3, 2, "a round of 2 nodes: the job runs", "green"),
             (2, 3, "node1's count (3) is not reached. node0 checks, but no\n"
                        "deadline to close the round was ever set, so it never closes:\n"
                        "node0 times out, node1 finds the rendezvous closed\n"
                        "or its store gone", "red")]
    for ax, (first, second, verdict, colour) in zip(axes, cases):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 3.4)
        ax.axis("off")
        box(ax, 0.3, 2.1, 4.0, 0.8, f"1st: node0, --nnodes {first}\nparticipants 1 of {first}", AGENT)
        met = "reached: closes the round" if second == 2 else "not reached: waits"
        box(ax, 5.3, 1.9, 4.4, 1.2, f"2nd: node1, --nnodes {second}\nparticipants 2 of {second}:\n{met}",
            STORE if second == 2 else FAILED)
        arrow(ax, (4.3, 2.5), (5.3, 2.5), "black")
        ax.text(5.0, 1.5, verdict, ha="center", va="top", fontsize=9, color=colour)
        ax.set_title(f"node0 --nnodes {first} first, then node1 --nnodes {second}", fontsize=9)
    fig.suptitle("Mismatched --nnodes: the joining node compares the participants with its own count", fontsize=10)
    fig.tight_layout()
    return fig

def _two_hosts(ax, bottom: float, height: float, labels: tuple[str, str]) -> tuple[float, float]:
    """node0's and node1's dashed frames, side by side, each labelled at its top; their left edges."""
    lefts = (0.2, 5.6)
    for x0, label in zip(lefts, labels):
        ax.add_patch(plt.Rectangle((x0, bottom), 4.2, height, facecolor="#f7f7f7", edgecolor="grey", linestyle="--"))
        ax.text(x0 + 0.1, bottom + height - 0.1, label, fontsize=9, weight="bold", va="top")
    return lefts


def plot_what_listens_where(rdzv_port: int = 29400) -> Figure:
    """Two hosts of a c10d job: on node0 the agent listens for the rendezvous store and the ranks'
    store, on every interface; on each host the rank's gloo listens on ports picked at run time;
    node1's agent listens on nothing and dials node0."""
    fig, ax = plt.subplots(figsize=(9, 4.0))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 5)
    ax.axis("off")
    for node, x0 in enumerate(_two_hosts(ax, bottom=0.2, height=4.3, labels=("node0", "node1"))):
        box(ax, x0 + 0.3, 0.5, 1.9, 0.9, f"rank {node}: gloo\nlistens on its interface,\na port picked at run time",
            RANK)
    box(ax, 0.5, 2.6, 1.9, 1.1, "agent (torchrun)\nlistens on *:" + str(rdzv_port) + "\nand *:MASTER_PORT", AGENT)
    box(ax, 2.6, 3.0, 1.6, 0.6, f"rendezvous store\n:{rdzv_port}", STORE)
    box(ax, 2.6, 2.1, 1.6, 0.6, "ranks' store\n:MASTER_PORT", STORE)
    box(ax, 5.9, 2.6, 1.9, 1.1, "agent (torchrun)\nlistens on nothing:\nit dials node0", AGENT)
    arrow(ax, (2.4, 3.3), (2.6, 3.3), "#b07000")  # node0's agent runs both stores
    arrow(ax, (2.4, 2.8), (2.6, 2.4), "#b07000")
    arrow(ax, (5.9, 3.3), (4.2, 3.3), "green")
    ax.text(5.05, 3.45, "join", fontsize=7, color="green", ha="center")
    arrow(ax, (6.9, 1.4), (4.2, 2.3), "tab:blue")
    arrow(ax, (1.3, 1.4), (2.8, 2.1), "tab:blue")
    ax.text(5.3, 1.95, "ranks: MASTER_ADDR:MASTER_PORT", fontsize=7, color="tab:blue", ha="center")
    arrow(ax, (2.2, 0.9), (5.9, 0.9), "purple", "<|-|>")
    ax.text(4.0, 0.55, "gloo, rank to rank", fontsize=7, color="purple", ha="center")
    ax.set_title("What listens where: '*' is every interface, whatever address the agent was given", fontsize=10)
    fig.tight_layout()
    return fig


def plot_name_unknown(address: str = "10.200.0.1", rdzv_port: int = 29400) -> Figure:
    """node0's name unknown on node1 (mistake 5): node1's agent dials the rendezvous at node0's
    ``address``, with no name to look up, and joins; the rendezvous then gives every rank
    ``MASTER_ADDR=node0``, a name, and node1's rank cannot look it up, so it never reaches the ranks'
    store, where rank 0 waits until the group's timeout."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4.6)
    ax.axis("off")
    _two_hosts(ax, bottom=0.1, height=4.1, labels=("node0", "node1: its /etc/hosts lacks node0"))
    box(ax, 0.4, 2.3, 3.2, 1.4, f"node0's agent, at {address}\nrendezvous store :{rdzv_port}\n"
        "ranks' store :MASTER_PORT\ngives MASTER_ADDR=node0", AGENT)
    box(ax, 0.4, 1.0, 2.4, 0.8, "rank 0\nwaits for rank 1", RANK)
    box(ax, 6.0, 2.6, 3.6, 0.9, f"node1's agent\n--rdzv-endpoint={address}:{rdzv_port}", AGENT)
    box(ax, 6.0, 0.5, 3.6, 0.9, "rank 1\ndials MASTER_ADDR=node0", FAILED)
    arrow(ax, (6.0, 3.05), (3.6, 3.05), "green")
    ax.text(4.8, 3.2, "1. an address: no lookup,\nthe rendezvous completes", fontsize=8, color="green", ha="center",
            va="bottom")
    arrow(ax, (6.0, 0.95), (5.0, 0.95), "red")
    ax.text(4.85, 0.95, "X", fontsize=14, color="red", weight="bold", ha="center", va="center")
    ax.text(4.6, 1.25, "2. look up 'node0': unknown here,\nso it never reaches the ranks' store", fontsize=8,
            color="red", ha="center", va="bottom")
    ax.text(1.6, 0.9, "DistStoreError: wait timeout,\nafter the group's timeout", fontsize=8, color="red",
            ha="center", va="top")
    ax.set_title("node0's name unknown on node1: the endpoint is an address, but MASTER_ADDR is a name", fontsize=10)
    fig.tight_layout()
    return fig
