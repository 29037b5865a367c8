"""Lesson 04 pictures: schematics (rank 0's weights broadcast by DDP's constructor; gradients
averaged by an all-reduce; a global batch split into rows per rank; buckets filled in reverse order
and sent while backward still runs; .grad copied into a bucket or a view of it; fp16 compression's
zone that becomes 0), then the measured timeline of backward against communication, per rank."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ddp_lib.plots.collectives import RANK_COLOURS, SUM_COLOUR

# Two shades that alternate from one all-reduce to the next, so neighbours stay apart.
COMM_COLOURS = ("tab:blue", "tab:orange")


def _cells(ax, x0: float, y: float, values: list[float], colour: str) -> None:
    for i, value in enumerate(values):
        ax.add_patch(Rectangle((x0 + i, y - 0.35), 1, 0.7, facecolor=colour, edgecolor="black"))
        ax.text(x0 + i + 0.5, y, f"{value:+.1f}", ha="center", va="center", fontsize=9)


def _before_and_after(before: list[list[float]], after: list[float], after_colour: str, middle: str,
                      labels: tuple[str, str], title: str) -> Figure:
    """Each rank's row of values (left), one box every rank passes through (middle), and the row every
    rank holds afterwards (right): the layout of the two schematics below."""
    world_size, n = len(before), len(before[0])
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.8 * world_size))
    ax.set_xlim(-1.6, 2 * n + 6.2)
    ax.set_ylim(world_size - 0.3, -1.0)
    ax.axis("off")
    box_x = n + 1.2
    ax.add_patch(Rectangle((box_x, -0.4), 3.4, world_size - 0.2, facecolor="whitesmoke", edgecolor="gray"))
    ax.text(box_x + 1.7, (world_size - 1) / 2, middle, ha="center", va="center", fontsize=9)
    right = box_x + 4.6
    for rank, own in enumerate(before):
        ax.text(-0.3, rank, f"rank {rank}", ha="right", va="center", fontsize=9)
        _cells(ax, 0, rank, own, RANK_COLOURS[rank % len(RANK_COLOURS)])
        _cells(ax, right, rank, after, after_colour)
        for start, end in ((n + 0.05, box_x - 0.05), (box_x + 3.45, right - 0.05)):
            ax.add_patch(FancyArrowPatch((start, rank), (end, rank), arrowstyle="-|>", mutation_scale=12))
    ax.text(n / 2, -0.75, labels[0], ha="center", fontsize=9)
    ax.text(right + n / 2, -0.75, labels[1], ha="center", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_construction_broadcast(weights: list[list[float]] | None = None) -> Figure:
    """Schematic: each rank's own initial weights (left); DDP(model) broadcasts rank 0's, so every
    rank starts from rank 0's weights (right)."""
    weights = weights or [[0.3, -0.1, 0.5], [-0.2, 0.4, 0.1]]
    return _before_and_after(weights, weights[0], RANK_COLOURS[0], "DDP(model):\nbroadcast\nfrom rank 0",
                             ("weights before DDP()", "weights after DDP()"),
                             "DDP's constructor copies rank 0's parameters (and buffers) to every rank")


def plot_gradient_average(grads: list[list[float]] | None = None) -> Figure:
    """Schematic: each rank's own ``.grad`` (left) goes into one all-reduce that sums them and
    scales by 1/world_size; every rank leaves backward() with the same mean (right)."""
    grads = grads or [[0.2, -0.4, 0.6], [0.6, 0.0, -0.2]]
    mean = [sum(column) / len(grads) for column in zip(*grads)]
    return _before_and_after(grads, mean, SUM_COLOUR, "all-reduce:\neach rank × 1/world_size,\nthen the sum",
                             ("its own .grad (its own data)", ".grad after backward()"),
                             "During backward(), DDP turns N different gradients into one: their mean, on every rank")


def plot_bucket_schedule(layers: int = 4, per_bucket: int = 2) -> Figure:
    """Schematic of one rank's backward: layers' gradients come out last layer first, fill buckets
    in that order, and each bucket's all-reduce starts as soon as its last gradient is in, while
    backward still computes the earlier layers."""
    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.set_xlim(-2.2, layers + 2.2)
    ax.set_ylim(2.0, -0.9)
    ax.axis("off")
    ax.text(-0.1, 0, "backward\ncomputes", ha="right", va="center", fontsize=9)
    ax.text(-0.1, 1.3, "all-reduces\n(on the wire)", ha="right", va="center", fontsize=9)
    for step in range(layers):
        layer = layers - 1 - step  # the last layer's gradient is computed first; layers 0 to layers - 1
        bucket = step // per_bucket
        ax.add_patch(Rectangle((step, -0.3), 1, 0.6, facecolor=RANK_COLOURS[bucket + 2], edgecolor="black"))
        ax.text(step + 0.5, 0, f"grad of\nlayer {layer}", ha="center", va="center", fontsize=8)
    for bucket in range(layers // per_bucket):
        ready = (bucket + 1) * per_bucket  # the moment the bucket's last gradient is in
        ax.add_patch(Rectangle((ready, 1.0), 1.4, 0.6, facecolor=RANK_COLOURS[bucket + 2], edgecolor="black"))
        ax.text(ready + 0.7, 1.3, f"bucket {bucket}", ha="center", va="center", fontsize=8)
        ax.add_patch(FancyArrowPatch((ready - 0.05, 0.32), (ready + 0.2, 0.98), arrowstyle="-|>",
                                     mutation_scale=12))
    ax.annotate("", xy=(layers + 1.6, -0.65), xytext=(0, -0.65), arrowprops=dict(arrowstyle="->", color="gray"))
    ax.text(layers / 2, -0.75, "time", ha="center", fontsize=9, color="gray")
    fig.suptitle("Gradients fill buckets last layer first; bucket 0 is sent while layers 1 and 0 "
                 "are still computed", fontsize=10)
    fig.tight_layout()
    return fig


def plot_timeline(timelines: list[dict], title: str = "One DDP backward: gradients ready vs bucket all-reduces",
                  names: list[str] | None = None, shade_waits: bool = False,
                  mark_synced: bool = False, prefixes: list[str] | None = None, mark_starts: bool = False) -> Figure:
    """Draw, per rank, the backward span with the moment each weight's gradient was ready, and
    below it one bar per all-reduce. ``timelines`` are backward_timeline's results in rank order;
    ``names`` label the rows instead of "rank 0", "rank 1", ... (e.g. to compare ways of one rank).
    ``shade_waits`` (rows that are the ranks of one job): each bar is pale until the last rank has
    started that all-reduce, the part a rank can only wait, as the clocks started together.
    ``mark_synced``: a dashed line across each row at its ``synced_ms``, when every gradient was averaged.
    ``prefixes``: per row, the letter before each all-reduce's number: "b" for a bucket's (the
    default), "p" for one parameter's.
    ``mark_starts``: each all-reduce's start is a triangle on the backward band, and its bar is pale and
    hatched, labelled as the wait until this rank saw it done (a bar alone looks like time on the wire)."""
    names = names or [f"rank {rank}" for rank in range(len(timelines))]
    prefixes = prefixes or ["b"] * len(timelines)
    lanes = max((ev["bucket"] for tl in timelines for ev in tl["allreduces"]), default=0) + 1
    last_start: dict[int, float] = {}  # bucket -> when the last rank started its all-reduce
    for tl in timelines:
        for ev in tl["allreduces"]:
            last_start[ev["bucket"]] = max(last_start.get(ev["bucket"], ev["start"]), ev["start"])
    block = 1.2 + 0.45 * lanes  # one block per row: backward, then one lane per all-reduce
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.4 * block * len(timelines)))
    labels, ticks = [], []
    for row, tl in enumerate(timelines):
        y_backward = block * row
        ax.barh(y_backward, tl["backward_ms"], left=0, height=0.6, color="lightgray",
                label="backward (until it returns)" if row == 0 else None)
        ready = [t for _, t in tl["grad_ready"]]
        # Above the start triangles (zorder), and taller: a bucket starts the moment its last gradient is ready.
        ax.plot(ready, [y_backward] * len(ready), "k|", markersize=20, markeredgewidth=1.5, zorder=4,
                label="a weight's gradient is ready" if row == 0 else None)
        for ev in tl["allreduces"]:
            # Each all-reduce in a lane of its own, so two in flight at once stay apart.
            y = y_backward + 0.8 + 0.45 * ev["bucket"]
            colour = COMM_COLOURS[ev["bucket"] % 2]
            if mark_starts:
                first = row == 0 and ev["bucket"] == 0
                ax.plot([ev["start"]], [y_backward], "v", color=colour, markeredgecolor="black", markersize=9,
                        label="an all-reduce starts" if first else None)
                ax.barh(y, ev["end"] - ev["start"], left=ev["start"], height=0.38, color=colour, alpha=0.35,
                        hatch="//", edgecolor="black",
                        label="waiting: from its start until this rank saw it done" if first else None)
            else:
                ax.barh(y, ev["end"] - ev["start"], left=ev["start"], height=0.38, color=colour, edgecolor="black",
                        label=None if row or ev["bucket"] > 1 else
                        f"an all-reduce, start to end ({prefixes[0]}0 starts first)" if ev["bucket"] == 0 else
                        "the next all-reduce (colours alternate)")
            if shade_waits:  # pale over the bar's first part, until the last rank started it
                waited = min(max(last_start[ev["bucket"]], ev["start"]), ev["end"]) - ev["start"]
                label = "pale: waiting for the other rank to start it" if row == 0 and ev["bucket"] == 0 else None
                ax.barh(y, waited, left=ev["start"], height=0.38, color="white", alpha=0.65, edgecolor="black",
                        label=label)
            if mark_starts:  # the name beside the bar, left of its start
                ax.text(ev["start"], y, f"{prefixes[row]}{ev['bucket']} ", ha="right", va="center", fontsize=9)
            else:
                ax.text(ev["start"], y, f"{prefixes[row]}{ev['bucket']}", ha="left", va="center", fontsize=9)
        own_lanes = max((ev["bucket"] for ev in tl["allreduces"]), default=0) + 1
        if mark_synced:  # from the backward bar down to this row's last lane
            ax.vlines(tl["synced_ms"], y_backward - 0.4, y_backward + 0.8 + 0.45 * (own_lanes - 1) + 0.3,
                      colors="crimson", linestyles="--", gid="synced",
                      label="every gradient averaged" if row == 0 else None)
        labels += [f"{names[row]}: backward", f"{names[row]}: {len(tl['allreduces'])} all-reduces"]
        ticks += [y_backward, y_backward + 0.8 + 0.45 * (own_lanes - 1) / 2]  # centred on this row's own bars
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("ms since backward() was called, after a barrier (the ranks start together)")
    ax.set_title(title)
    ax.invert_yaxis()  # the first row on top
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    fig.tight_layout()
    return fig


def plot_batch_split(world_size: int = 2, per_rank_batch: int = 4, strided: bool = False) -> Figure:
    """Schematic: one global batch of world_size * per_rank_batch rows; rank r takes rows
    r*B to (r+1)*B - 1 (strided=True: rows r, r + N, r + 2N, ..., as DistributedSampler deals them),
    computes its gradient on them, and the all-reduce averages the ranks' gradients,
    which for a mean loss is the gradient of the whole batch."""
    rows = world_size * per_rank_batch
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.32 * rows))
    ax.set_xlim(-0.5, 10)
    ax.set_ylim(rows + 0.2, -0.9)
    ax.axis("off")
    ax.text(0.6, -0.5, "global batch", ha="center", fontsize=9)
    for row in range(rows):
        rank = row % world_size if strided else row // per_rank_batch
        ax.add_patch(Rectangle((0, row), 1.2, 0.9, facecolor=RANK_COLOURS[rank % len(RANK_COLOURS)],
                               edgecolor="black"))
        ax.text(0.6, row + 0.45, f"row {row}", ha="center", va="center", fontsize=7.5)
        if strided:  # one arrow per row, to its rank
            middle = rank * per_rank_batch + per_rank_batch / 2
            ax.add_patch(FancyArrowPatch((1.3, row + 0.45), (3.0, middle), arrowstyle="-|>", mutation_scale=9,
                                         color=RANK_COLOURS[rank % len(RANK_COLOURS)]))
    for rank in range(world_size):
        middle = rank * per_rank_batch + per_rank_batch / 2
        if strided:
            taken = ", ".join(str(row) for row in range(rank, rows, world_size))
        else:
            taken = f"{rank * per_rank_batch}-{(rank + 1) * per_rank_batch - 1}"
            ax.add_patch(FancyArrowPatch((1.3, middle), (3.0, middle), arrowstyle="-|>", mutation_scale=12))
        ax.text(3.1, middle, f"rank {rank}: rows {taken} -> its own gradient", va="center", fontsize=9)
        ax.add_patch(FancyArrowPatch((7.3, middle), (8.1, rows / 2), arrowstyle="-|>", mutation_scale=12))
    ax.text(8.2, rows / 2, "mean of the\nranks' gradients\n= gradient of\nthe whole batch", va="center",
            fontsize=9)
    dealt = "its rows, dealt in turn," if strided else "its rows"
    fig.suptitle(f"{world_size} ranks x batch {per_rank_batch}: each rank takes {dealt} of one global batch "
                 f"of {rows}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_copy_vs_view() -> Figure:
    """Schematic of one bucket of three gradients. Default: each .grad has its own memory, is copied
    into the bucket (scaled) and the mean is copied back. gradient_as_bucket_view=True: each .grad is
    a window into the bucket, so there is nothing to copy, as long as the window is kept."""
    fig, ax = plt.subplots(figsize=(9, 2.8))
    ax.set_xlim(-2.6, 8.5)
    ax.set_ylim(2.9, -0.6)
    ax.axis("off")
    for row, title in enumerate(("default: copy", "gradient_as_bucket_view=True")):
        y = 1.7 * row
        ax.text(-0.2, y + 0.7, title, ha="right", va="center", fontsize=9, weight="bold")
        ax.add_patch(Rectangle((4.0, y + 0.4), 3.6, 0.6, facecolor=SUM_COLOUR, edgecolor="black"))
        ax.text(5.8, y + 1.2, "bucket (one flat tensor, all-reduced)", ha="center", fontsize=8)
        for i in range(3):
            if row == 0:
                ax.add_patch(Rectangle((0.2 + 1.1 * i, y + 0.4), 0.9, 0.6, facecolor=RANK_COLOURS[i + 2],
                                       edgecolor="black"))
                ax.text(0.65 + 1.1 * i, y + 0.7, f".grad {i}", ha="center", va="center", fontsize=8)
                ax.add_patch(Rectangle((4.0 + 1.2 * i, y + 0.4), 1.2, 0.6, facecolor=RANK_COLOURS[i + 2],
                                       edgecolor="black", alpha=0.5))
            else:
                ax.add_patch(Rectangle((4.0 + 1.2 * i, y + 0.4), 1.2, 0.6, facecolor=RANK_COLOURS[i + 2],
                                       edgecolor="black"))
                ax.text(4.6 + 1.2 * i, y + 0.7, f".grad {i}", ha="center", va="center", fontsize=8)
        if row == 0:
            ax.add_patch(FancyArrowPatch((3.4, y + 0.55), (3.95, y + 0.55), arrowstyle="-|>", mutation_scale=10))
            ax.add_patch(FancyArrowPatch((3.95, y + 0.85), (3.4, y + 0.85), arrowstyle="-|>", mutation_scale=10))
            ax.text(3.65, y + 0.15, "copy in (x 1/N), copy back", ha="center", fontsize=7.5)
        else:
            ax.text(1.8, y + 0.7, "no memory of their own:\n.grad i is a window\ninto the bucket",
                    ha="center", va="center", fontsize=8)
    fig.suptitle("Where .grad lives: beside the bucket (two copies per step) or inside it", fontsize=10)
    fig.tight_layout()
    return fig


def plot_fp16_flush_zone(world_size: int = 3) -> Figure:
    """Schematic number line near zero, in units of float16's smallest step 2**-24:
    fp16_compress_hook casts a float32 gradient to float16, then divides by world_size in float16,
    so a gradient whose float16 value is at most world_size/2 steps (world_size * 2**-25) becomes 0."""
    limit = world_size / 2
    top = 2 * world_size
    fig, ax = plt.subplots(figsize=(9, 1.9))
    ax.set_xlim(-0.3, top + 0.3)
    ax.set_ylim(-1.0, 1.1)
    ax.axis("off")
    ax.add_patch(Rectangle((0, -0.25), limit, 0.5, facecolor="mistyrose", edgecolor="tab:red"))
    ax.text(limit / 2, 0.45, f"becomes 0\n(at most {limit:g} steps)", ha="center", fontsize=8.5, color="tab:red")
    ax.plot([0, top], [0, 0], color="black")
    for k in range(top + 1):
        ax.plot([k, k], [-0.12, 0.12], color="black")
        ax.text(k, -0.5, f"{k}", ha="center", fontsize=8.5)
    ax.text(top / 2, -0.9, "a gradient's float16 value on one rank, in steps of 2**-24 (float16's smallest subnormal)",
            ha="center", fontsize=8.5)
    fig.suptitle(f"fp16_compress_hook on {world_size} ranks: cast to float16, then / {world_size} in float16: "
                 "at most half a step left means 0", fontsize=10)
    fig.tight_layout()
    return fig


def plot_no_sync(grad_accum_steps: int = 2) -> Figure:
    """Schematic of one optimizer step of gradient accumulation on one rank: every micro-batch but the
    last runs forward and backward inside no_sync() and only adds into .grad; the last runs outside
    it, so its backward all-reduces the summed gradients; then optimizer.step()."""
    fig, ax = plt.subplots(figsize=(9, 2.0))
    width = 2.0
    ax.set_xlim(-0.2, width * grad_accum_steps + 1.6)
    ax.set_ylim(1.9, -0.6)
    ax.axis("off")
    for i in range(grad_accum_steps):
        last = i == grad_accum_steps - 1
        x = width * i
        ax.add_patch(Rectangle((x, 0), width - 0.1, 0.6, facecolor="whitesmoke" if not last else "honeydew",
                               edgecolor="black"))
        ax.text(x + width / 2 - 0.05, 0.3, f"micro-batch {i + 1}\nforward + backward", ha="center",
                va="center", fontsize=8)
        ax.text(x + width / 2 - 0.05, -0.3, "inside no_sync()" if not last else "outside no_sync()",
                ha="center", fontsize=8.5, color="gray" if not last else "tab:green")
        if last:
            ax.add_patch(Rectangle((x + 0.5, 1.0), width - 0.6, 0.5, facecolor=COMM_COLOURS[0], edgecolor="black"))
            ax.text(x + width / 2 + 0.2, 1.25, "all-reduce", ha="center", va="center", fontsize=8, color="white")
        else:
            ax.text(x + width / 2 - 0.05, 1.25, "adds into .grad,\nno all-reduce", ha="center", va="center",
                    fontsize=8)
    x = width * grad_accum_steps
    ax.add_patch(Rectangle((x, 0), 1.4, 0.6, facecolor=SUM_COLOUR, edgecolor="black"))
    ax.text(x + 0.7, 0.3, "optimizer\n.step()", ha="center", va="center", fontsize=8)
    fig.suptitle(f"Gradient accumulation over {grad_accum_steps} micro-batches: one all-reduce per optimizer step",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_unused_head() -> Figure:
    """Schematic of TwoHeads with head b unused: its gradient never arrives, so its bucket is never
    all-reduced and DDP cannot finish; find_unused_parameters=True walks the graph from the output
    after forward, finds b, and backward then counts b as ready."""
    fig, ax = plt.subplots(figsize=(9, 2.4))
    ax.set_xlim(0, 10)
    ax.set_ylim(2.4, 0)
    ax.axis("off")
    boxes = {"input": (0.2, 0.95, "whitesmoke"), "trunk": (2.0, 0.95, "white"), "a": (4.2, 0.35, "white"),
             "b": (4.2, 1.55, "gainsboro"), "output": (6.4, 0.35, "whitesmoke")}
    for name, (x, y, colour) in boxes.items():
        ax.add_patch(Rectangle((x, y), 1.5, 0.5, facecolor=colour, edgecolor="black" if name != "b" else "gray"))
        ax.text(x + 0.75, y + 0.25, name if name != "b" else "b (unused)", ha="center", va="center", fontsize=8.5,
                color="black" if name != "b" else "gray")
    for start, end in (((1.7, 1.2), (2.0, 1.2)), ((3.5, 1.1), (4.2, 0.6)), ((5.7, 0.6), (6.4, 0.6))):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12))
    ax.add_patch(FancyArrowPatch((3.5, 1.3), (4.2, 1.8), arrowstyle="-|>", mutation_scale=12, color="gray",
                                 linestyle="--"))
    ax.text(8.0, 0.6, "backward reaches\ntrunk and a only", ha="left", va="center", fontsize=8)
    ax.text(5.9, 1.8, "no gradient: its bucket never fills, and DDP stops at the next forward\n"
            "find_unused_parameters=True: found after forward, ready in backward", ha="left", va="center", fontsize=8,
            color="tab:red")
    fig.suptitle("A parameter that gets no gradient: DDP waits for it unless told to look", fontsize=10)
    fig.tight_layout()
    return fig
