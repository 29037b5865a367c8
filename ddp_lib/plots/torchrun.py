"""Pictures for lesson 06: who listens where in a torchrun job, and what a restart does."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.shapes import arrow, box


def plot_torchrun_layout() -> Figure:
    """Two nodes of one rank each under torchrun's c10d rendezvous: each node's agent and rank; the
    rendezvous store at --rdzv-endpoint, where the agents meet, held by whichever agent there binds the
    endpoint's port first (not necessarily node 0's); the ranks' store at MASTER_PORT, which node 0's
    agent runs and every rank dials; and the ranks' own connection to each other."""
    rdzv_colour, ranks_colour = "#d9ead3", "#e4d7f5"  # green: the agents' store; violet: the ranks'
    fig, ax = plt.subplots(figsize=(9, 5.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 6.4)
    ax.axis("off")
    for node, (x0, width, x_label, align) in enumerate(((0.1, 5.9, 5.9, "right"), (6.3, 3.6, 9.8, "right"))):
        ax.add_patch(FancyBboxPatch((x0, 0.15), width, 4.75, boxstyle="round,pad=0.02", facecolor="none",
                                    edgecolor="grey", linestyle="--"))
        ax.text(x_label, 4.8, f"node {node} (GROUP_RANK={node})", fontsize=9, weight="bold", va="top", ha=align)
    for node, x in enumerate((0.4, 7.6)):
        box(ax, x, 3.3, 2.0, 0.9, f"agent (torchrun)\nnode {node}", "#fde9c9")
        box(ax, x, 0.5, 2.0, 0.9, f"rank {node}\nRANK={node}, LOCAL_RANK=0", "#cfe2f3")
        arrow(ax, (x + 1.0, 3.3), (x + 1.0, 1.4), "#b07000")  # the agent starts its rank
        ax.text(x + 1.08, 2.35, "starts", fontsize=8, color="#b07000")
    # The rendezvous store belongs to no node: the agent that binds --rdzv-endpoint's port first holds it
    box(ax, 3.4, 5.3, 3.2, 0.9, "rendezvous store, at --rdzv-endpoint\nheld by the agent there that binds it first",
        rdzv_colour)
    arrow(ax, (2.0, 4.2), (3.4, 5.6), "green", "<|-|>")  # both agents meet at the rendezvous store
    arrow(ax, (8.0, 4.2), (6.6, 5.6), "green", "<|-|>")
    ax.text(5.0, 5.24, "both agents meet here", fontsize=8, color="green", ha="center", va="top")
    box(ax, 3.3, 2.0, 2.4, 0.8, "ranks' store\nMASTER_PORT (a free port)", ranks_colour)
    arrow(ax, (2.4, 3.45), (3.3, 2.5), "#b07000")  # node 0's agent runs the ranks' store
    ax.text(2.3, 2.75, "runs the\nranks' store", fontsize=8, color="#b07000", ha="right")
    for start, end in (((2.4, 1.2), (3.9, 2.0)), ((7.6, 1.2), (5.1, 2.0))):  # every rank dials the ranks' store
        arrow(ax, start, end, "purple")
    ax.text(4.5, 1.55, "each rank's\ninit_process_group", fontsize=8, color="purple", ha="center")
    arrow(ax, (2.4, 0.7), (7.6, 0.7), "tab:blue", "<|-|>")
    ax.text(5.0, 0.78, "rank to rank (gloo or nccl), on ports picked at run time", ha="center", va="bottom",
            fontsize=8, color="tab:blue")
    ax.set_title("Who listens where: two nodes of one rank each", fontsize=10)
    fig.tight_layout()
    return fig


def plot_restart_timeline(epochs: int, fail_in_epoch: int, world_size: int = 2) -> Figure:
    """Each rank's epochs, counted from 0 as ``train.py`` counts them, across two attempts: the last
    rank raises in epoch ``fail_in_epoch``, torchrun stops the others and starts every rank again;
    the new attempt loads the checkpoint of the epoch before and trains from ``fail_in_epoch`` on."""
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.7 * world_size))
    restart_gap = 1.2  # drawn width of stop + new rendezvous + start, in epochs
    resumed_at = fail_in_epoch + restart_gap  # where attempt 1's first epoch is drawn
    for rank in range(world_size):
        for epoch in range(fail_in_epoch):
            ax.barh(rank, 0.95, left=epoch, color="tab:blue", alpha=0.7,
                    label="attempt 0" if rank == 0 and epoch == 0 else None)
            ax.text(epoch + 0.47, rank, str(epoch), ha="center", va="center", fontsize=8)
        failed_at = fail_in_epoch + (0.25 if rank == world_size - 1 else 0.35)
        if rank == world_size - 1:
            ax.plot(failed_at, rank, "rx", markersize=12, mew=3)
            ax.annotate(f"raises in epoch {fail_in_epoch}", (failed_at, rank), xytext=(0, -22),
                        textcoords="offset points", ha="center", fontsize=8, color="red")
        else:
            ax.plot(failed_at, rank, "k|", markersize=14, mew=2)
            ax.annotate("loses its peer: raises, or is stopped", (failed_at, rank), xytext=(0, 12),
                        textcoords="offset points", ha="center", fontsize=8)
        for i, epoch in enumerate(range(fail_in_epoch, epochs)):
            ax.barh(rank, 0.95, left=resumed_at + i, color="tab:green", alpha=0.7,
                    label=f"attempt 1, from the checkpoint of epoch {fail_in_epoch - 1}"
                    if rank == 0 and i == 0 else None)
            ax.text(resumed_at + i + 0.47, rank, str(epoch), ha="center", va="center", fontsize=8)
    ax.axvspan(fail_in_epoch + 0.5, resumed_at - 0.05, color="grey", alpha=0.2)
    # Inside the grey band, upright: above the bars it would run into the legend.
    ax.text(fail_in_epoch + 0.8, (world_size - 1) / 2, "new rendezvous", rotation=90, ha="center", va="center",
            fontsize=7)
    ax.set_xticks([])
    ax.set_xlabel("time, left to right; each box is one epoch, numbered as train.py prints it")
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.invert_yaxis()
    ax.legend(loc="lower left", fontsize=8, ncol=2, bbox_to_anchor=(0, 1.02))
    fig.tight_layout()
    return fig


def plot_port_choice() -> Figure:
    """The three one-node jobs of lesson 06's port cell, named as there: left, ``standalone`` (its
    --master-port P is ignored) and ``plain`` (no options), each on a free port of its own; right,
    ``taken``, given --master-port P without --standalone, finds P held by another program."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 2.6))
    titles = ("--standalone (a --master-port is ignored), or no options:\neach job gets a free port",
              "--master-port P without --standalone: P is taken")
    for ax, title in zip(axes, titles):
        ax.set_xlim(0, 5)
        ax.set_ylim(0, 3)
        ax.axis("off")
        ax.set_title(title, fontsize=9)
    left, right = axes
    for i, (job, port) in enumerate((("standalone\n--standalone --master-port P", "port 41873"),
                                     ("plain\n(no options)", "port 38507"))):
        y = 1.8 - i * 1.3
        box(left, 0.1, y, 2.2, 0.75, job, "#fde9c9")
        box(left, 2.9, y, 1.8, 0.75, f"its ranks' store\n{port} (free)", "#d9ead3")
        arrow(left, (2.3, y + 0.375), (2.9, y + 0.375), "green")
    box(right, 0.2, 1.7, 1.6, 0.8, "another program", "#eeeeee")
    box(right, 2.9, 1.05, 1.8, 0.8, "port P", "#f4cccc")
    arrow(right, (1.8, 2.1), (2.9, 1.6), "grey")
    box(right, 0.2, 0.4, 1.6, 0.8, "taken\n--master-port P", "#fde9c9")
    arrow(right, (1.8, 0.8), (2.9, 1.3), "red")
    right.text(1.9, 0.2, "address already in use", color="red", fontsize=8, ha="left")
    fig.tight_layout()
    return fig


def plot_log_dir_tree() -> Figure:
    """The folders torchrun makes under --log-dir: one per run, one per attempt inside it, one per
    local rank inside that, with the files each rank's folder can hold and what writes them."""
    rows = [  # (depth, name, what it is)
        (0, "<log-dir>/", "--log-dir; without it, a new torchelastic_* folder in tempfile.gettempdir()"),
        (1, "<rdzv-id>_<random>/", "one per run of torchrun"),
        (2, "attempt_0/", "the first start of this node's ranks"),
        (3, "0/", "local rank 0"),
        (4, "stdout.log, stderr.log", "with --redirects (or --tee)"),
        (4, "error.json", "written by @record when the rank raises"),
        (3, "1/", "local rank 1: the same files"),
        (2, "attempt_1/", "after a restart: TORCHELASTIC_RESTART_COUNT=1"),
    ]
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 0.5))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axis("off")
    ax.invert_yaxis()
    last_row_at = {}  # depth -> the row of the latest folder at that depth: a child's parent
    for row, (depth, name, note) in enumerate(rows):
        x = 0.2 + depth * 0.55
        if depth:  # an elbow down from the parent folder
            ax.plot([x - 0.4, x - 0.4, x - 0.08], [last_row_at[depth - 1] + 0.3, row, row], color="grey", lw=1)
        last_row_at[depth] = row
        colour = "#fde9c9" if name.endswith("/") else "#cfe2f3"
        ax.text(x, row, name, va="center", fontsize=9, family="monospace",
                bbox=dict(boxstyle="round,pad=0.2", facecolor=colour, edgecolor="black", lw=0.6))
        ax.text(5.6, row, note, va="center", fontsize=8, color="#444444")
    ax.set_title("What torchrun keeps under --log-dir: folders (orange), files (blue)", fontsize=10)
    fig.tight_layout()
    return fig
