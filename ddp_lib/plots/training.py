"""Pictures for lesson 05: loss curves of several runs on one plot."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator


def plot_loss_curves(curves: dict[str, list[float]], title: str = "training loss", ax=None,
                     bands: dict[str, tuple[list[float], list[float]]] | None = None):
    """One line per run: ``curves`` maps a label (e.g. "2 ranks") to its per-epoch losses.
    ``bands`` optionally maps a label to per-epoch (lowest, highest) losses, shaded in the line's colour
    (e.g. the range over several seeds). Returns the matplotlib Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.5))
    for label, losses in curves.items():
        epochs = range(1, len(losses) + 1)
        (line,) = ax.plot(epochs, losses, marker="o", markersize=3, label=label)
        if bands and label in bands:
            low, high = bands[label]
            ax.fill_between(epochs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
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


def plot_lr_scaling(scaling: dict):
    """Lesson 05's learning-rate runs, from ``batch_scaling.summarize_lr_scaling``'s result: left, 1 rank at
    lr 0.1 against 4 ranks at lr 0.1 and 0.4; right, 4 ranks at lr 0.4 with and without warm-up. Each line is
    the mean over the seeds, shaded over their range; lr 0.4 keeps its colour in both. Returns the Figure."""
    from ddp_lib.demos.batch_scaling import FOUR_RANKS, ONE_RANK

    labels = {"1 rank": ONE_RANK, **FOUR_RANKS}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = [(left, "scaling the learning rate",
               {"1 rank": "tab:blue", "lr 0.1": "tab:orange", "lr 0.4": "tab:green"}),
              (right, "lr 0.4 with and without warm-up", {"lr 0.4": "tab:green", "lr 0.4, warm-up": "tab:red"})]
    for ax, title, colours in panels:
        ax.set_prop_cycle(color=list(colours.values()))
        shown = [labels[k] for k in colours]
        plot_loss_curves({k: scaling["means"][k] for k in shown}, f"{title}\n(mean of {scaling['seeds']} seeds)",
                         ax=ax, bands={k: scaling["ranges"][k] for k in shown})
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18))  # below the axes, off the curves
    right.set_ylabel("")  # the axis is shared
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


KIND_COLOURS = {"work": "C0", "collective": "C1", "waits": "0.85", "shadow": "C2", "stuck": "C3"}


def plot_rank_timeline(rows: dict[str, list[tuple[str, float, float, str]]], title: str):
    """Schematic timeline, one row per rank: each box is (label, start, length, kind), its colour
    given by kind ("work", "collective", "waits", "shadow", "stuck"). Boxes of one collective line up
    across the rows. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.55 * len(rows)))
    for row, (label, boxes) in enumerate(rows.items()):
        y = -row * 0.6
        ax.text(-0.15, y + 0.2, label, ha="right", va="center")
        for text, start, length, kind in boxes:
            ax.add_patch(plt.Rectangle((start, y), length, 0.4, facecolor=KIND_COLOURS[kind], alpha=0.45,
                                       edgecolor="black", hatch="//" if kind == "stuck" else None))
            ax.text(start + length / 2, y + 0.2, text, ha="center", va="center", fontsize=8)
    end = max(start + length for boxes in rows.values() for _, start, length, _ in boxes)
    ax.set_xlim(-1.3, end + 0.1)
    ax.set_ylim(-0.6 * (len(rows) - 1) - 0.1, 0.55)
    ax.axis("off")
    ax.set_title(title)
    return fig


def plot_rank0_evaluation():
    """Schematic: rank 0 evaluates while rank 1 waits in a barrier. Through the DDP wrapper (top rows),
    rank 0's forward starts a buffer broadcast that rank 1's barrier never matches, and both ranks wait
    until the timeout; through ``ddp_model.module`` (bottom rows), rank 0 starts no collective and both
    pass the barrier."""
    train = ("train", 0, 2, "work")
    return plot_rank_timeline({
        "wrapper, rank 0": [train, ("ddp_model(x): broadcast buffers...", 2.1, 4.4, "stuck")],
        "rank 1": [train, ("dist.barrier()...", 2.1, 4.4, "stuck")],
        ".module, rank 0": [train, ("ddp_model.module(x)", 2.1, 2.6, "work"), ("barrier", 4.8, 1.2, "collective")],
        "rank 1 ": [train, ("in the barrier: waits", 2.1, 2.6, "waits"), ("barrier", 4.8, 1.2, "collective")],
    }, "evaluation on rank 0: through ddp_model, each rank waits in another collective until the timeout;\n"
       "through ddp_model.module, no collective starts and both ranks pass the barrier")


def plot_join_timeline():
    """Schematic of Join for rank 0 with 2 batches and rank 1 with 4: in steps 3 and 4, rank 0, out
    of data, answers rank 1's all-reduces with all-reduces of zeros ("shadows"), then both leave Join
    together, with a few more all-reduces and the final broadcast of the model. One box stands for all of a
    step's all-reduces (DDP's and Join's own), as the title says; its label keeps the singular to fit."""
    rows = {"rank 0": [], "rank 1": []}
    for step in range(4):
        x = step * 2.0
        rows["rank 1"] += [(f"step {step + 1}", x, 0.75, "work"), ("all-reduce", x + 0.75, 1.15, "collective")]
        if step < 2:
            rows["rank 0"] += [(f"step {step + 1}", x, 0.75, "work"), ("all-reduce", x + 0.75, 1.15, "collective")]
        else:
            rows["rank 0"] += [("in Join", x, 0.75, "waits"), ("all-reduce\nof zeros", x + 0.75, 1.15, "shadow")]
    for boxes in rows.values():
        boxes.append(("leave Join:\nall-reduces, broadcast", 8.0, 2.7, "collective"))
    return plot_rank_timeline(rows, "Join: rank 0 runs out of data after step 2 "
                                    "(one orange box: a step's all-reduces);\n"
                                    "in steps 3 and 4 it answers rank 1's all-reduces with all-reduces of zeros")



def plot_crash_resume(crash_epoch: int = 3, epochs: int = 3):
    """Schematic of the template's crash and resume: a job trains one epoch at a time, then rank 0
    saves ``last.pt`` and every rank waits at a barrier (the orange boxes: "save + barrier" on rank 0,
    "barrier" on rank 1); rank 1 crashes in
    ``crash_epoch``. In a second job, rank 0 alone reads ``last.pt`` and broadcasts what it read to
    every rank, then both train the rest."""
    rows = {"job 1, rank 0": [], "job 1, rank 1": [], "job 2, rank 0": [], "job 2, rank 1": []}
    for epoch in range(1, crash_epoch):
        x = (epoch - 1) * 2.0
        rows["job 1, rank 0"] += [(f"e{epoch}", x, 1.0, "work"), ("save +\nbarrier", x + 1.0, 0.85, "collective")]
        # only rank 0 saves
        rows["job 1, rank 1"] += [(f"e{epoch}", x, 1.0, "work"), ("barrier", x + 1.0, 0.85, "collective")]
    x = (crash_epoch - 1) * 2.0
    rows["job 1, rank 0"].append((f"e{crash_epoch}...", x, 1.0, "stuck"))
    rows["job 1, rank 1"].append(("crash", x, 1.0, "stuck"))
    start = x + 1.2
    rows["job 2, rank 0"].append(("read last.pt", start, 1.9, "work"))
    for rank in (0, 1):
        rows[f"job 2, rank {rank}"].append(("broadcast", start + 2.0, 1.6, "collective"))
        for k, epoch in enumerate(range(crash_epoch, epochs + 1)):
            rows[f"job 2, rank {rank}"].append((f"e{epoch}", start + 3.7 + 1.1 * k, 1.0, "work"))
    return plot_rank_timeline(rows, f"e = epoch; then rank 0 saves last.pt and every rank waits at a barrier. "
                                    f"Rank 1 crashes in epoch {crash_epoch}.\n"
                                    f"In job 2, rank 0 alone reads last.pt and broadcasts it to every rank")


def plot_sync_batchnorm():
    """Schematic of one SyncBatchNorm layer on 2 ranks x 16 samples: each rank's own statistics,
    all-gathered in the forward pass, so both normalise with the statistics of all 32 samples; the
    backward pass all-reduces two sums."""
    rows = {}
    for rank in (0, 1):
        rows[f"rank {rank}"] = [("stats of my 16", 0, 1.7, "work"),
                                ("all-gather stats", 1.8, 1.9, "collective"),
                                ("my 16, all-32 stats", 3.8, 2.0, "work"),
                                ("bwd: all-reduce", 5.9, 1.9, "collective")]
    return plot_rank_timeline(rows, "SyncBatchNorm in one layer: forward, then backward (bwd)")


def plot_padded_vs_strided(samples: int = 10, world_size: int = 4):
    """Schematic of evaluation shards, one row per rank. Left: DistributedSampler without shuffling
    pads ``samples`` to a multiple of ``world_size`` by repeating its start (hatched: read twice).
    Right: rank r takes samples r, r + world_size, ...: each sample once, some ranks one fewer."""
    padded = list(range(samples)) + list(range((-samples) % world_size))
    panels = {"DistributedSampler: padded": [padded[r::world_size] for r in range(world_size)],
              "samples r, r + N, ...: each once": [list(range(r, samples, world_size)) for r in range(world_size)]}
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.9 + 0.5 * world_size))
    for ax, (title, shards) in zip(axes, panels.items()):
        for r, shard in enumerate(shards):
            ax.text(-0.3, -r * 0.6 + 0.2, f"rank {r}", ha="right", va="center")
            for slot, sample in enumerate(shard):
                twice = sum(s.count(sample) for s in shards) > 1
                ax.add_patch(plt.Rectangle((slot, -r * 0.6), 0.9, 0.4, facecolor=f"C{r}", alpha=0.35,
                                           hatch="//" if twice else None, edgecolor="black"))
                ax.text(slot + 0.45, -r * 0.6 + 0.2, str(sample), ha="center", va="center")
        read = sum(len(s) for s in shards)
        ax.set_title(f"{title}\n{read} reads of {samples} samples", fontsize=10)
        ax.set_xlim(-1.6, max(len(s) for s in shards) + 0.2)
        ax.set_ylim(-0.6 * world_size + 0.1, 0.6)
        ax.axis("off")
    fig.suptitle("evaluation shards (hatched: a sample read twice)", fontsize=10)
    fig.tight_layout()
    return fig
