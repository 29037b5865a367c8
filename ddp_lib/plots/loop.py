"""Schematics for lesson 09: DistributedSampler's padded index list split between ranks, when
DDP's all-reduces can start in the backward of a compiled model, with and without the split into
pieces (optimize_ddp), how collectives pair by order, and a GradScaler's scale over the steps; and the
measured figures: two runs' losses and their gap, and each step's time."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

RANK_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")


def plot_padded_indices(n_samples: int = 11, world_size: int = 2):
    """The index list DistributedSampler(shuffle=False) builds: 0 .. n_samples - 1, padded with its
    first indices to a multiple of world_size. Position p goes to rank p % world_size; padding is
    hatched. Returns the Figure."""
    padded = -(-n_samples // world_size) * world_size
    indices = [p % n_samples for p in range(padded)]  # the padding repeats the first indices
    fig, ax = plt.subplots(figsize=(0.55 * padded + 1.5, 1.6))
    for position, index in enumerate(indices):
        rank = position % world_size
        ax.add_patch(plt.Rectangle((position, 0), 0.9, 0.9, facecolor=RANK_COLOURS[rank], alpha=0.6,
                                   hatch="//" if position >= n_samples else None, edgecolor="black"))
        ax.text(position + 0.45, 0.45, str(index), ha="center", va="center", fontsize=10)
        ax.text(position + 0.45, -0.3, str(position), ha="center", va="center", fontsize=7, color="0.4")
    ax.text(-0.2, -0.3, "position", ha="right", va="center", fontsize=7, color="0.4")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=RANK_COLOURS[r], alpha=0.6, edgecolor="black")
               for r in range(world_size)]
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", hatch="//", edgecolor="black"))
    ax.legend(handles, [f"rank {r}" for r in range(world_size)] + ["padding (a repeat)"], fontsize="small",
              loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=world_size + 1)
    ax.set_xlim(-1.5, padded + 0.2)
    ax.set_ylim(-0.6, 1.0)
    ax.axis("off")
    ax.set_title(f"{n_samples} samples on {world_size} ranks: the list padded to {padded}, "
                 f"position p to rank p % {world_size}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_compiled_backward(buckets: int = 3):
    """A schematic of one compiled backward, time running right, for a model whose parameters fill
    ``buckets`` DDP buckets. With optimize_ddp=True the graph is cut into one piece per bucket: each
    piece's backward ends with its gradients ready, and that bucket's all-reduce starts while the next
    piece computes. With optimize_ddp=False one graph's backward ends with every gradient at once,
    so every all-reduce waits for it. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    rows = {"split at buckets\n(default)": True, "one graph\n(split turned off)": False}
    for row, split in enumerate(rows.values()):
        y = 2.2 - 1.6 * row  # a compute lane above a communication lane
        for b in range(buckets):
            start = b * 1.0
            if split:
                ax.add_patch(plt.Rectangle((start, y), 1.0, 0.5, facecolor="0.85", edgecolor="black"))
                ax.text(start + 0.5, y + 0.25, f"backward of\npiece {b}", ha="center", va="center", fontsize=10)
                ar_start = start + 1.0
            else:
                ar_start = buckets * 1.0 + b * 0.8
            ax.add_patch(plt.Rectangle((ar_start, y - 0.6), 0.8, 0.5, facecolor="tab:red", alpha=0.7,
                                       edgecolor="black"))
            ax.text(ar_start + 0.4, y - 0.35, f"all-reduce\nbucket {b}", ha="center", va="center", fontsize=10)
        if not split:
            ax.add_patch(plt.Rectangle((0, y), buckets * 1.0, 0.5, facecolor="0.85", edgecolor="black"))
            ax.text(buckets / 2, y + 0.25, "one graph's backward: DDP's hooks fire at its end",
                    ha="center", va="center", fontsize=10)
    ax.set_yticks([2.0, 0.4], list(rows))
    ax.set_xlim(0, buckets * 1.8 + 0.3)
    ax.set_ylim(-0.3, 2.9)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic) →   pieces and buckets numbered from the output: piece 0 holds bucket 0's layers")
    ax.set_title("a compiled DDP backward: grey computes, red all-reduces", fontsize=10)
    fig.tight_layout()
    return fig


def plot_measured_backward(overlap: dict):
    """The measured counterpart of ``plot_compiled_backward``: one rank's last step, from
    ``allreduces_during_backward``'s result (``overlap``), in the same layout. Grey boxes are the backward
    graphs as they ran; red bars the all-reduces, from DDP starting each to its end (the n-th end is drawn
    with the n-th start). Returns the Figure."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    rows = {"split at buckets\n(default)": overlap["optimize_ddp=True"],
            "one graph\n(split turned off)": overlap["optimize_ddp=False"]}
    height = 0.0
    for row, run in enumerate(rows.values()):
        y = 2.2 - 1.6 * row  # a compute lane above a communication lane, as in the schematic
        start = None
        starts = [t * 1e3 for event, t in run["timeline"] if event == "all-reduce"]
        ends = [t * 1e3 for event, t in run["timeline"] if event == "all-reduce ends"]
        for event, t in run["timeline"]:
            ms = t * 1e3
            if event == "backward graph starts":
                start = ms
            elif event == "backward graph ends":
                ax.add_patch(plt.Rectangle((start, y), ms - start, 0.5, facecolor="0.85", edgecolor="black"))
            height = max(height, ms)
        lane = 0.5 / max(len(starts), 1)  # one thin lane per all-reduce, so that bars do not hide each other
        for k, ar_start in enumerate(starts):
            bottom = y - 0.1 - (k + 1) * lane
            if k < len(ends):
                ax.add_patch(plt.Rectangle((ar_start, bottom), max(ends[k] - ar_start, 0.0), lane * 0.8,
                                           facecolor="tab:red", alpha=0.5, edgecolor="black"))
            ax.plot([ar_start, ar_start], [bottom, bottom + lane * 0.8], color="tab:red", linewidth=3)  # its start
    ax.set_yticks([2.0, 0.4], list(rows))
    ax.set_xlim(0, height * 1.05)
    ax.set_ylim(-0.3, 2.9)
    ax.set_xlabel("ms from the step's first backward graph (measured, rank 0's last step)")
    ax.set_title("measured: grey boxes are backward graphs, red bars all-reduces (start to end)", fontsize=10)
    fig.tight_layout()
    return fig


DTYPE_COLOURS = {"float32": "tab:cyan", "16-bit": "tab:pink"}  # not RANK_COLOURS: a colour means one thing


def _box(ax, x: float, y: float, text: str, dtype: str, width: float = 1.9) -> None:
    ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, facecolor=DTYPE_COLOURS[dtype], alpha=0.45,
                               edgecolor="black"))
    ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=8)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str = "") -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="0.3"))
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, text, ha="center", fontsize=7,
                color="0.3")


def plot_dtype_flow():
    """A schematic of one autocast step under DDP: which tensors are 16-bit (bf16 or fp16) and which
    float32. Forward: the float32 weights are cast to 16-bit copies for the matrix multiplications,
    whose outputs are 16-bit; the loss (cross_entropy) comes out float32. Backward: the gradients reach the
    float32 weights as float32, and DDP all-reduces float32; the optimizer updates the float32
    weights, which are the master weights. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(10, 2.8))
    _box(ax, 0, 2, "weights (float32)", "float32")
    _box(ax, 2.6, 2, "16-bit copy\nof the weights", "16-bit")
    _box(ax, 5.2, 2, "matmul outputs,\nlogits (16-bit)", "16-bit")
    _box(ax, 7.8, 2, "loss: cross_entropy\nin float32", "float32")
    _arrow(ax, (1.9, 2), (2.6, 2), "cast")
    _arrow(ax, (4.5, 2), (5.2, 2), "matmul")
    _arrow(ax, (7.1, 2), (7.8, 2))
    _box(ax, 7.8, 0.6, "backward", "16-bit")
    _box(ax, 5.2, 0.6, "gradients\n(float32)", "float32")
    _box(ax, 2.6, 0.6, "DDP all-reduce\n(float32)", "float32")
    _box(ax, 0, 0.6, "optimizer step on\nfloat32 weights", "float32")
    _arrow(ax, (8.75, 1.7), (8.75, 0.9))
    _arrow(ax, (7.8, 0.6), (7.1, 0.6), "cast back")
    _arrow(ax, (5.2, 0.6), (4.5, 0.6))
    _arrow(ax, (2.6, 0.6), (1.9, 0.6))
    _arrow(ax, (0.95, 0.9), (0.95, 1.7), "update")
    ax.text(0.95, 1.35, "", fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, alpha=0.45, edgecolor="black") for c in DTYPE_COLOURS.values()]
    ax.legend(handles, ["float32", "16-bit (bf16 or fp16)"], fontsize="small", loc="upper center",
              bbox_to_anchor=(0.5, -0.02), ncol=2)
    ax.set_xlim(-0.2, 9.9)
    ax.set_ylim(0.1, 2.5)
    ax.axis("off")
    ax.set_title("autocast, one step: forward on top, backward below. "
                 "The float32 weights are the master weights", fontsize=10)
    fig.tight_layout()
    return fig


def plot_clipping(world_size: int = 2):
    """A schematic of where clipping goes, in two panels of one row per rank.

    Upper panel, the right order: backward gives a local gradient, DDP's all-reduce averages it, the
    GradScaler unscales it (fp16 only), then the norm is measured and the gradient clipped. Every rank
    measures the same averaged gradient, so every rank clips by the same factor.
    Lower panel, the mistake (clipping inside ``no_sync`` or before a hand-written all-reduce): each
    rank measures its own gradient and clips it by its own factor; only then are they averaged.
    Coloured boxes hold values that differ between ranks, grey ones the same values.
    Returns the Figure."""
    right = ["backward:\nlocal gradient", "all-reduce:\naverage", "unscale_\n(fp16 only)",
             "norm of the\naveraged gradient", "scale by min(1,\nmax_norm/norm)", "optimizer\nstep"]
    wrong = ["backward:\nlocal gradient", "unscale_\n(fp16 only)", "norm of the\nlocal gradient",
             "own scale min(1,\nmax_norm/norm)", "all-reduce:\naverage", "optimizer\nstep"]
    fig, (upper, lower) = plt.subplots(2, 1, figsize=(11, 2 * (0.9 * world_size + 1)))
    for ax, steps, synced_at, title in (
            (upper, right, 1, "clip after the all-reduce (and after unscale_): every rank clips the same "
                              "gradient by the same factor"),
            (lower, wrong, 4, "the mistake, clipped before the all-reduce (under no_sync or a hand-written "
                              "sync): each rank clips by its own factor")):
        for rank in range(world_size):
            y = world_size - 1 - rank
            for k, text in enumerate(steps):
                colour = RANK_COLOURS[rank] if k < synced_at else "0.85"
                ax.add_patch(plt.Rectangle((k * 1.95, y - 0.3), 1.65, 0.6, facecolor=colour, alpha=0.5,
                                           edgecolor="black"))
                ax.text(k * 1.95 + 0.825, y, text, ha="center", va="center", fontsize=9)
                if k:
                    ax.annotate("", xy=(k * 1.95, y), xytext=(k * 1.95 - 0.3, y),
                                arrowprops=dict(arrowstyle="->", color="0.3"))
            ax.text(-0.2, y, f"rank {rank}", ha="right", va="center", fontsize=9)
        ax.add_patch(plt.Rectangle((synced_at * 1.95 - 0.1, -0.45), 1.85, world_size - 0.1, fill=False,
                                   edgecolor="tab:red", linestyle="--"))
        ax.text(synced_at * 1.95 + 0.825, world_size - 0.45, "every rank: the same\naveraged gradient from here",
                ha="center", fontsize=9, color="tab:red")
        ax.set_xlim(-1.2, len(steps) * 1.95)
        ax.set_ylim(-0.6, world_size + 0.1)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_collective_pairing():
    """A schematic of lesson 09's rank-0-only evaluation with a stray all-reduce: each rank's
    collectives in the order it calls them, after DDP's construction. The n-th call of rank 0 pairs
    with the n-th of rank 1; the second pair differs in kind and shape, so it never finishes.
    Returns the Figure."""
    calls = {0: ["all-reduce\nfirst step's gradients", "all-reduce\nthe metric (evaluation)"],
             1: ["all-reduce\nfirst step's gradients", "DDP's own broadcast\n(second forward)",
                 "DDP's own broadcast\n(second forward)"]}
    fig, ax = plt.subplots(figsize=(9, 2.4))
    for rank, names in calls.items():
        y = 1 - rank
        for k, name in enumerate(names):
            ax.add_patch(plt.Rectangle((k * 2.4, y - 0.3), 2.0, 0.6, facecolor=RANK_COLOURS[rank], alpha=0.5,
                                       edgecolor="black"))
            ax.text(k * 2.4 + 1.0, y, name, ha="center", va="center", fontsize=8)
        ax.text(-0.2, y, f"rank {rank}", ha="right", va="center", fontsize=9)
    for k, (colour, text) in enumerate((("tab:green", "pair: finishes"), ("tab:red", "pair: never finishes"))):
        ax.annotate("", xy=(k * 2.4 + 1.0, 0.3), xytext=(k * 2.4 + 1.0, 0.7),
                    arrowprops=dict(arrowstyle="<->", color=colour, lw=2))
        ax.text(k * 2.4 + 1.1, 0.5, text, va="center", fontsize=8, color=colour)
    ax.text(2 * 2.4 + 1.0, 1.0, "(not reached)", ha="center", va="center", fontsize=8, color="0.4")
    ax.set_xlim(-1.2, 3 * 2.4)
    ax.set_ylim(-0.5, 1.5)
    ax.axis("off")
    ax.set_title("the n-th collective of each rank pairs with the n-th of the other, whatever it is",
                 fontsize=10)
    fig.tight_layout()
    return fig


def scale_schedule(steps: int, overflow_step: int, init_scale: float, growth_interval: int) -> list[float]:
    """The scale a GradScaler uses at each step, by its rules with the default factors: a step with an
    inf/nan gradient is skipped and halves the scale; ``growth_interval`` clean steps in a row double it."""
    scale, clean, scales = init_scale, 0, []
    for step in range(steps):
        scales.append(scale)
        if step == overflow_step:
            scale, clean = scale / 2, 0
        else:
            clean += 1
            if clean == growth_interval:
                scale, clean = scale * 2, 0
    return scales


def plot_scale_over_steps(steps: int = 7, overflow_step: int = 2, init_scale: float = 1024.0,
                          growth_interval: int = 2):
    """A schematic of a GradScaler's scale over the steps (``scale_schedule``), the overflowed step
    marked. Returns the Figure."""
    scales = scale_schedule(steps, overflow_step, init_scale, growth_interval)
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.step(range(steps), scales, where="mid", color="0.3")
    for step, value in enumerate(scales):
        skipped = step == overflow_step
        ax.plot(step, value, "X" if skipped else "o", color="tab:red" if skipped else "tab:blue", markersize=9)
    ax.annotate("inf on one rank: every rank skips\nthis step, the scale halves",
                xy=(overflow_step, scales[overflow_step]), xytext=(overflow_step + 0.6, scales[overflow_step] * 0.9),
                fontsize=8, color="tab:red", arrowprops=dict(arrowstyle="->", color="tab:red"))
    ax.set_xticks(range(steps))
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("scale (log 2)")
    ax.set_title(f"the scale: doubled after {growth_interval} clean steps, halved at an overflow", fontsize=10)
    fig.tight_layout()
    return fig


def plot_loss_gap(runs: dict[str, dict]):
    """Two panels for two runs ``{"fp32": run, "bf16": run}`` of ``train_loop_measured``: their loss
    curves, and the gap between them per epoch on a log scale, against 1e-3. Returns the Figure."""
    (name_a, a), (name_b, b) = runs.items()
    gaps = [abs(x - y) for x, y in zip(a["losses"], b["losses"])]
    epochs = range(1, len(gaps) + 1)
    fig, (curves, gap_ax) = plt.subplots(1, 2, figsize=(10, 3))
    for (name, run), style, dtype in zip(runs.items(), ("-o", "--x"), DTYPE_COLOURS):
        curves.plot(epochs, run["losses"], style, label=name, color=DTYPE_COLOURS[dtype])
    curves.set(xlabel="epoch", ylabel="loss", title="the two loss curves, 2 ranks")
    gap_ax.semilogy(epochs, gaps, marker="o", color="0.3", label=f"|{name_b} loss - {name_a} loss|")
    gap_ax.axhline(1e-3, color="grey", linestyle="--", label="1e-3")
    gap_ax.set(xlabel="epoch", ylabel="loss difference (log scale)", title="their gap")
    for ax in (curves, gap_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
        ax.legend()
    fig.tight_layout()
    return fig


def plot_step_times(runs: dict[str, dict]):
    """Each step's time of ``{name: run}`` (runs of ``train_loop_measured``), on a log scale, with the
    last run's first step marked as the compile. Returns the Figure."""
    fig, ax = plt.subplots(figsize=(5.5, 3))
    for name, run in runs.items():
        ax.semilogy([seconds * 1000 for seconds in run["step_seconds"]], marker="o", label=name)
    first_ms = list(runs.values())[-1]["step_seconds"][0] * 1000
    ax.annotate("compiles", (0, first_ms), xytext=(2, first_ms), va="center", arrowprops=dict(arrowstyle="->"))
    ax.set(xlabel="step", ylabel="step time (ms, log scale)", title="one epoch of LoopNet, rank 0's steps")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    fig.tight_layout()
    return fig

