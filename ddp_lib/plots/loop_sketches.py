"""Schematics for lesson 09's habits of a DDP loop: batch norm's buffers drifting apart after the last
step, a barrier after rank-0-only saving, gradient accumulation under ``no_sync``, and which seed each
kind of randomness takes. One row per rank,
time running right; boxes of one colour hold the same values on every rank."""

from __future__ import annotations

import matplotlib.pyplot as plt

RANK_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def _box(ax, x: float, y: float, width: float, text: str, colour: str = "0.85", hatch: str | None = None,
         fontsize: float = 9) -> None:
    ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, facecolor=colour, alpha=0.55, edgecolor="black",
                               hatch=hatch))
    ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=fontsize)


def _rank_labels(ax, world_size: int) -> None:
    for rank in range(world_size):
        ax.text(-0.15, world_size - 1 - rank, f"rank {rank}", ha="right", va="center", fontsize=9)


def plot_buffer_drift(steps: int = 2, world_size: int = 2):
    """Batch norm's buffers under DDP: each training forward starts with DDP broadcasting rank 0's
    buffers (grey, the same on every rank), then batch norm updates them from each rank's own batch
    (coloured, different per rank). No forward follows the last step's, so the buffers stay different
    until the evaluation broadcasts them. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(11, 1.1 * world_size + 1.2))
    x = 0.0
    for step in range(steps):
        ax.add_patch(plt.Rectangle((x, -0.35), 0.9, world_size - 0.3, facecolor="tab:red", alpha=0.5,
                                   edgecolor="black"))
        ax.text(x + 0.45, (world_size - 1) / 2, "DDP\ncopies\nrank 0's\nbuffers", ha="center", va="center",
                fontsize=9)
        for rank in range(world_size):
            _box(ax, x + 1.0, world_size - 1 - rank, 1.9, f"step {step + 1}: batch norm\n"
                 "updates its buffers\nfrom this rank's batch", RANK_COLOURS[rank])
        x += 3.1
    for rank in range(world_size):
        _box(ax, x, world_size - 1 - rank, 1.6, "evaluate:\nbuffers differ", RANK_COLOURS[rank])
    ax.text(x + 0.8, world_size - 0.45, "no forward follows the last step", ha="center", fontsize=9, color="0.3")
    _rank_labels(ax, world_size)
    ax.set_xlim(-1.0, x + 1.8)
    ax.set_ylim(-0.5, world_size)
    ax.axis("off")
    ax.set_title("batch norm's buffers under DDP: equal after each broadcast, different after the last step "
                 "(time runs right)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_save_then_barrier():
    """Rank 0 works, then saves a file; rank 1 looks for it. Without a barrier rank 1 looks at
    once and finds nothing; with one, rank 1 waits in the barrier until rank 0 has saved and called
    it too, then every rank reads the file. Returns the Figure."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 2.3))
    for ax, barrier in zip(axes, (False, True)):
        _box(ax, 0, 1, 2.0, "rank 0 works", RANK_COLOURS[0])
        _box(ax, 2.0, 1, 1.0, "save file", RANK_COLOURS[0])
        if barrier:
            _box(ax, 3.0, 1, 0.3, "", "tab:red")
            _box(ax, 0.2, 0, 3.1, "barrier: waits for rank 0", "tab:red", hatch="//")
            _box(ax, 3.3, 1, 1.1, "read: found", "tab:green")
            _box(ax, 3.3, 0, 1.1, "read: found", "tab:green")
            ax.axvline(3.3, color="tab:red", linestyle="--", lw=1)
            ax.text(3.3, 1.4, "no rank leaves before every rank has entered", ha="center", fontsize=7, color="tab:red")
        else:
            _box(ax, 0.2, 0, 1.1, "read: missing", "tab:red")
        _rank_labels(ax, 2)
        ax.set_xlim(-1.0, 4.6)
        ax.set_ylim(-0.5, 1.8)
        ax.axis("off")
        ax.set_title("with dist.barrier() after the save" if barrier else "without a barrier", fontsize=10)
    fig.suptitle("rank 0 saves alone; the others must wait before they read (time runs right)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_no_sync_accumulation(micro_batches: int = 2, world_size: int = 2):
    """One optimizer step of gradient accumulation under DDP: every micro-batch but the last runs
    forward and backward inside ``no_sync()`` (the gradients add up in .grad, nothing is sent); the
    last one's backward all-reduces the sum, once; then clip and step. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(11, 1.1 * world_size + 1.2))
    x = 0.0
    for k in range(micro_batches):
        last = k == micro_batches - 1
        for rank in range(world_size):
            text = f"micro-batch {k + 1}\nforward, backward" + ("" if last else "\nin no_sync()")
            _box(ax, x, world_size - 1 - rank, 1.8, text, RANK_COLOURS[rank])
        if not last:
            ax.text(x + 1.9, world_size - 0.45, "adds to .grad,\nsends nothing", fontsize=9, color="0.3")
        x += 2.4
    # DDP starts it in the last backward, as that backward's gradients become ready
    ax.add_patch(plt.Rectangle((x - 0.5, -0.35), 1.2, world_size - 0.3, facecolor="tab:red", alpha=0.5,
                               edgecolor="black"))
    ax.text(x + 0.1, (world_size - 1) / 2, "one\nall-reduce\nof the sum",
            ha="center", va="center", fontsize=9)
    for rank in range(world_size):
        _box(ax, x + 0.9, world_size - 1 - rank, 1.2, "clip the\naverage")
        _box(ax, x + 2.3, world_size - 1 - rank, 1.0, "optimizer\nstep")
    _rank_labels(ax, world_size)
    ax.set_xlim(-1.0, x + 3.5)
    ax.set_ylim(-0.5, world_size)
    ax.axis("off")
    ax.set_title(f"gradient accumulation: {micro_batches} micro-batches, one all-reduce per optimizer step "
                 "(time runs right)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_seeds(world_size: int = 2):
    """Which seed each kind of randomness takes on each rank: the initial weights the same seed
    everywhere (one colour), dropout masks seed + rank (a colour per rank), and the shuffle the
    sampler's seed + epoch, one order of the data that the ranks then split. Returns the Figure."""
    columns = [("initial weights", "torch.manual_seed(seed)"),
               ("dropout masks", "torch.manual_seed(seed + rank)"),
               ("shuffle", "DistributedSampler: seed + epoch")]
    fig, ax = plt.subplots(figsize=(10, 0.8 * world_size + 1.3))
    for rank in range(world_size):
        y = world_size - 1 - rank
        _box(ax, 0, y, 2.6, "the same weights", "0.6", fontsize=10)
        _box(ax, 3.0, y, 2.6, f"mask of rank {rank}", RANK_COLOURS[rank], fontsize=10)
        order = " ".join(str(i) for i in [7, 2, 5, 0, 3, 6, 1, 4][rank::world_size])
        _box(ax, 6.0, y, 3.2, f"one order 7 2 5 0 3 6 1 4,\nrank {rank} reads {order}", "0.6", fontsize=10)
    for k, (title, call) in enumerate(columns):
        left = (0, 3.0, 6.0)[k]
        width = (2.6, 2.6, 3.2)[k]
        ax.text(left + width / 2, world_size - 0.25, f"{title}\n{call}", ha="center", va="bottom", fontsize=10)
    _rank_labels(ax, world_size)
    ax.set_xlim(-1.0, 9.4)
    ax.set_ylim(-0.5, world_size + 0.6)
    ax.axis("off")
    ax.set_title("grey: the same on every rank; coloured: different on each rank", fontsize=10, y=1.02)
    fig.tight_layout()
    return fig
