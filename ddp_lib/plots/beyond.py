"""Pictures for lesson 10: who holds what under each strategy (a schematic), memory per rank as
stacked bars (one bar per strategy, a part missing from a bar counts as zero), and one step's
collectives."""

from __future__ import annotations

import matplotlib.pyplot as plt

# Only parts counted from tensor sizes, and DDP's bucket copy derived from where the gradients lie:
# every bar is a sum of sizes, never a measurement that can fall below them.
PARTS = ("parameters", "gradients", "optimizer state", "DDP's bucket copy")
PART_COLOURS = {"parameters": "tab:blue", "gradients": "tab:orange", "optimizer state": "tab:green",
                "DDP's bucket copy": "tab:red", "activations": "tab:gray"}
# Legend text where it differs from the part's name: without resharding, the forward also keeps the gathered weights.
LEGEND = {"activations": "held by the forward\n(activations,\ngathered weights)"}
# What each strategy divides between the ranks (the ZeRO stages); a DDP bucket copy where there is one.
SHARDED = {"DDP": (), "ZeRO-1": ("optimizer state",), "ZeRO-2": ("optimizer state", "gradients"),
           "ZeRO-3 / FSDP2": ("optimizer state", "gradients", "parameters")}


def plot_who_holds_what(world_size: int = 2):
    """A schematic: one row per strategy, one group of blocks per rank. A full block is a whole copy
    of parameters (4 bytes each), gradients (4) or Adam's state (8, so twice as wide); a sharded part
    is the rank's 1/world_size slice, drawn at its place in the whole. Returns the Figure."""
    widths = {"parameters": 1.0, "gradients": 1.0, "optimizer state": 2.0}
    rank_width = sum(widths.values()) + 0.6
    fig, ax = plt.subplots(figsize=(2.6 * world_size + 1.5, 0.75 * len(SHARDED) + 1))
    for row, sharded in enumerate(SHARDED.values()):
        y = len(SHARDED) - 1 - row
        for rank in range(world_size):
            x = rank * rank_width
            for part, width in widths.items():
                ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, fill=False, edgecolor="0.6", ls=":"))
                if part in sharded:
                    share = width / world_size
                    ax.add_patch(plt.Rectangle((x + rank * share, y - 0.3), share, 0.6,
                                               facecolor=PART_COLOURS[part], edgecolor="black"))
                else:
                    ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, facecolor=PART_COLOURS[part],
                                               edgecolor="black"))
                x += width
            if row == 0:
                ax.text(rank * rank_width + (rank_width - 0.6) / 2, len(SHARDED) - 0.45, f"rank {rank}",
                        ha="center", fontsize=9)
    ax.set_yticks(range(len(SHARDED)), list(reversed(SHARDED)))
    ax.set_xlim(-0.1, world_size * rank_width)
    ax.set_ylim(-0.6, len(SHARDED) - 0.2)
    ax.set_xticks([])
    ax.set_title(f"held after backward on {world_size} ranks (dotted: a whole copy)")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=PART_COLOURS[p], edgecolor="black") for p in widths]
    ax.legend(handles, list(widths), fontsize="small", loc="lower center", bbox_to_anchor=(0.5, -0.22), ncol=3)
    fig.tight_layout()
    return fig


def plot_memory_bars(panels: dict[str, dict[str, dict[str, int]]]):
    """One panel per entry of ``panels`` (title -> {bar label -> {part -> bytes}}), each bar stacked
    from the parts in PARTS, then "activations" where a bar has them, in MB. Returns the Figure."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.5), sharey=True, squeeze=False)
    for ax, (title, bars) in zip(axes[0], panels.items()):
        labels = list(bars)
        bottom = [0.0] * len(labels)
        for part in PARTS + ("activations",):
            heights = [bars[label].get(part, 0) / 1e6 for label in labels]
            ax.bar(labels, heights, bottom=bottom, label=LEGEND.get(part, part), color=PART_COLOURS[part])
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_title(title)
        ax.set_xlabel("strategy")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("MB on rank 0\nparts added, not one moment")
    axes[0][-1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the bars
    fig.tight_layout()
    return fig


# Bytes one rank sends per byte of the full tensor on 2 ranks (lesson 08's ring factors with N = 2).
SEND_FACTOR = {"all-reduce": 1.0, "all-gather": 0.5, "reduce-scatter": 0.5, "broadcast": 0.5}
COLOURS = {"compute": "0.85", "all-reduce": "tab:red", "all-gather": "tab:blue", "reduce-scatter": "tab:green",
           "broadcast": "tab:orange"}


def step_schedules(layers: int = 3) -> dict[str, list[tuple[str, str]]]:
    """What one training step runs under each strategy, in order: (label, kind) per box, kind being
    "compute" or a collective. Each collective carries one layer's weights or gradients, or all of
    them for DDP's all-reduce. ZeRO-1 broadcasts each layer's updated weights apart, as torch sends
    one broadcast per parameter tensor (the biases' broadcasts, a few bytes each, are not drawn)."""
    forward = [(f"F{i}", "compute") for i in range(1, layers + 1)]
    backward = [(f"B{i}", "compute") for i in range(layers, 0, -1)]
    def prefetch(i):  # the next layer's all-gather, started before layer i's backward
        return [(f"AG{i - 1}", "all-gather")] if i > 1 else []

    gathered = [box for i in range(1, layers + 1) for box in ((f"AG{i}", "all-gather"), (f"F{i}", "compute"))]
    return {
        "DDP": forward + backward + [("AR", "all-reduce"), ("opt", "compute")],
        "ZeRO-1 (torch)": forward + backward + [("AR", "all-reduce"), ("opt", "compute")]
                          + [(f"BC{i}", "broadcast") for i in range(1, layers + 1)],
        # In backward each layer's all-gather is started before the layer after it is reduce-scattered
        # (prefetching): the order the traced collectives show.
        "FSDP2": gathered + [(f"AG{layers}", "all-gather")]
                 + [box for i in range(layers, 0, -1)
                    for box in prefetch(i) + [(f"B{i}", "compute"), (f"RS{i}", "reduce-scatter")]]
                 + [("opt", "compute")],
        "FSDP2, no reshard": gathered + [box for i in range(layers, 0, -1) for box in
                                         ((f"B{i}", "compute"), (f"RS{i}", "reduce-scatter"))] + [("opt", "compute")],
    }


def plot_step_schedules(layers: int = 3, strategies: tuple[str, ...] | None = None, fixed_cost: float = 0.0):
    """A schematic: one row per strategy (``strategies``, names of ``step_schedules``; None: all),
    the boxes of one step in order. A collective's width is the bytes one rank sends on 2 ranks, in
    units of one layer's weights, plus ``fixed_cost`` (lesson 08's α: with it, widths read as time,
    nothing overlapping); compute boxes have a fixed width. The number at the right end of a row sums
    the collectives' bytes. Returns the Figure."""
    schedules = {name: boxes for name, boxes in step_schedules(layers).items()
                 if strategies is None or name in strategies}
    fig, ax = plt.subplots(figsize=(11, 0.8 * len(schedules) + 1))
    right = 0.0
    for row, boxes in enumerate(schedules.values()):
        y, x, sent = len(schedules) - 1 - row, 0.0, 0.0
        for label, kind in boxes:
            whole = label == "AR"  # DDP's all-reduce carries every layer
            carried = 0 if kind == "compute" else SEND_FACTOR[kind] * (layers if whole else 1)
            width = 0.6 if kind == "compute" else fixed_cost + carried
            sent += carried
            ax.add_patch(plt.Rectangle((x, y - 0.3), width, 0.6, facecolor=COLOURS[kind], edgecolor="black"))
            ax.text(x + width / 2, y, label, ha="center", va="center", fontsize=7)
            x += width
        ax.text(x + 0.2, y, f"sent: {sent:g} layers", va="center", fontsize=9)
        right = max(right, x)
    # On this 1 MB model DDP's gradients fit one bucket: its all-reduce starts after the whole backward.
    shown = {"DDP": "DDP (one bucket here)", "ZeRO-1 (torch)": "ZeRO-1: broadcasts one\nper tensor, drawn per layer"}
    ax.set_yticks(range(len(schedules)), [shown.get(name, name) for name in reversed(schedules)])
    ax.set_xlim(0, right + 2.5)
    ax.set_ylim(-0.6, len(schedules) + 0.2)  # room for the legend above the top row
    ax.set_xticks([])
    if fixed_cost:
        ax.set_xlabel(f"time, nothing overlapping. Collective width: a fixed cost of {fixed_cost:g} plus the bytes\n"
                      "a rank sends, in units of one layer's weights. Compute boxes: fixed width", fontsize=10)
    else:
        ax.set_xlabel("in order of the step, not time. Collective width: bytes a rank sends, in units of one layer's\n"
                      "weights. Compute boxes: fixed width", fontsize=10)
    ax.set_title(f"one step of {layers} layers on 2 ranks")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="black") for c in COLOURS.values()]
    ax.legend(handles, list(COLOURS), fontsize="small", loc="upper right", ncol=5)
    fig.tight_layout()
    return fig


def plot_mesh_2x2():
    """A schematic of HSDP's 2x2 DeviceMesh: rank 2 * i + j at row i, column j. Each row is a
    "shard" group (its ranks split the parameters: all-gather, reduce-scatter), each column a "replicate" group
    (its ranks hold the same shard, all-reduce). Returns the Figure."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for i in range(2):
        for j in range(2):
            x, y = 1.6 * j, 1.2 * (1 - i)
            ax.add_patch(plt.Rectangle((x, y), 1.2, 0.8, facecolor="0.92", edgecolor="black"))
            ax.text(x + 0.6, y + 0.5, f"rank {2 * i + j}", ha="center", va="center", fontsize=10)
            ax.text(x + 0.6, y + 0.2, f"shard {j} of each layer", ha="center", va="center", fontsize=7)
        y = 1.2 * (1 - i)  # a row: one shard group
        ax.add_patch(plt.Rectangle((-0.1, y - 0.08), 3.0, 0.96, fill=False, edgecolor="tab:green", lw=2))
        label = f"shard group {i}:\nall-gather,\nreduce-scatter"
        ax.text(3.0, y + 0.4, label, color="tab:green", va="center", fontsize=8)
    for j in range(2):  # a column: one replicate group
        x = 1.6 * j
        ax.add_patch(plt.Rectangle((x - 0.05, -0.15), 1.3, 2.3, fill=False, edgecolor="tab:red", lw=1.5, ls="--"))
        ax.text(x + 0.6, 2.25, f"replicate group {j}: all-reduce", color="tab:red", ha="center", fontsize=8)
    ax.set_xlim(-0.3, 4.2)
    ax.set_ylim(-0.3, 2.5)
    ax.axis("off")
    ax.set_title('init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))', fontsize=9)
    fig.tight_layout()
    return fig


def plot_activation_checkpointing(layers: int = 4):
    """A schematic of one step of ``layers`` layers, each activation drawn as a bar over its lifetime,
    in three rows. Plain: layer i's activation lives from "forward i" to "backward i". One checkpointed
    segment of all the layers: the forward keeps only the segment's input; backward first runs the whole
    forward again, and layer i's activation lives from "forward i again" to "backward i". Each layer its
    own checkpoint, as the lesson's recipe wraps each block: the forward keeps each layer's input, and
    backward runs layer i's forward again just before "backward i". Returns the Figure."""
    fig, ax = plt.subplots(figsize=(12, 7.2))
    bar_h, gap = 0.2, 0.06  # one bar per kept tensor, stacked under its row
    rows = {"plain": 6.0, f"one checkpointed\nsegment of {layers} layers": 3.9,
            "each layer its own\ncheckpoint\n(the recipe below)": 1.5}
    for row, (name, y) in enumerate(rows.items()):
        steps = [("forward", k, "0.85", f"forward\n{k + 1}") for k in range(layers)]
        if row == 1:
            steps += [("again", k, "tab:orange", f"forward\n{k + 1} again") for k in range(layers)]
        for k in reversed(range(layers)):
            if row == 2:
                steps.append(("again", k, "tab:orange", f"forward\n{k + 1} again"))
            steps.append(("backward", k, "tab:blue", f"backward\n{k + 1}"))
        start = {}
        for x, (kind, k, color, label) in enumerate(steps):
            ax.add_patch(plt.Rectangle((x, y), 0.9, 0.6, facecolor=color, alpha=0.5 if kind != "forward" else 1,
                                       edgecolor="black"))
            ax.text(x + 0.45, y + 0.3, label, ha="center", va="center", fontsize=8)
            start[kind, k] = x
        # lifetimes: from the start of the forward that makes a tensor to the end of its backward
        if row == 0:
            lives = [(f"layer {k + 1}", start["forward", k], start["backward", k] + 0.9) for k in range(layers)]
        elif row == 1:
            lives = [("input", start["forward", 0], start["backward", 0] + 0.9)]
            lives += [(f"layer {k + 1}", start["again", k], start["backward", k] + 0.9) for k in range(layers)]
        else:
            lives = [(f"input {k + 1}", start["forward", k], start["backward", k] + 0.9) for k in range(layers)]
            lives += [(f"layer {k + 1}", start["again", k], start["backward", k] + 0.9) for k in range(layers)]
        for i, (what, first, last) in enumerate(lives):
            bar_y = y - (i + 1) * (bar_h + gap)
            color = "tab:green" if what.startswith("input") else "tab:red"
            ax.add_patch(plt.Rectangle((first, bar_y), last - first, bar_h, facecolor=color, alpha=0.6,
                                       edgecolor="black"))
            ax.text(first - 0.08, bar_y + bar_h / 2, what, ha="right", va="center", fontsize=9)
        ax.text(-1.1, y + 0.3, name, ha="right", va="center", fontsize=10)
    legend_y = -0.9
    ax.add_patch(plt.Rectangle((0, legend_y), 0.3, 0.2, facecolor="tab:red", alpha=0.6, edgecolor="black"))
    ax.text(0.4, legend_y + 0.1, "a layer's activation, kept from the forward that makes it until its backward",
            va="center", fontsize=9)
    ax.add_patch(plt.Rectangle((0, legend_y - 0.35), 0.3, 0.2, facecolor="tab:green", alpha=0.6, edgecolor="black"))
    ax.text(0.4, legend_y - 0.25, "a checkpoint's input, kept until the checkpoint's backward ends",
            va="center", fontsize=9)
    ax.set_xlim(-3.6, 3 * layers + 0.2)
    ax.set_ylim(legend_y - 0.5, 6.8)
    ax.axis("off")
    ax.set_title("activation checkpointing: each bar is a kept tensor's lifetime (time runs right)", fontsize=11)
    fig.tight_layout()
    return fig
