"""Lesson 00's pictures: what runs where when a notebook starts a DDP job, and the file a file:// job meets in.

The notebook's kernel calls a launcher; the launcher starts ``world_size`` processes; each
process calls ``init_process_group``, which meets the others through a store (a TCPStore at
MASTER_ADDR:MASTER_PORT) and then builds the process group: with gloo, direct links between every pair of
ranks, over which the collectives run. Rank 0 serves the store, unless the launcher does.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddp_lib.plots.collectives import RANK_COLOURS

_BOX = dict(boxstyle="round,pad=0.02,rounding_size=0.08", edgecolor="black", linewidth=1)


def _box(ax, x: float, y: float, w: float, h: float, text: str, colour: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, facecolor=colour, **_BOX))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], text: str = "", **style) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="black", **style))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.08, (start[1] + end[1]) / 2, text, fontsize=8, va="center")


def plot_job_map(world_size: int = 4) -> Figure:
    """Notebook -> launcher -> ``world_size`` rank processes -> store -> process group, top to bottom."""
    fig, ax = plt.subplots(figsize=(9, 4.6))
    width = 1.6 * world_size
    _box(ax, width / 2 - 1.4, 4.3, 2.8, 0.55, "notebook (Jupyter kernel)", "#f0f0f0")
    # mp.spawn is a function: it runs in the notebook's process and starts the ranks from there.
    _box(ax, width / 2 - 2.2, 3.3, 4.4, 0.55, "launcher: torch's mp.spawn, a function\nrun by the notebook's process",
         "#f0f0f0")
    _arrow(ax, (width / 2, 4.3), (width / 2, 3.85), "mp.spawn(fn, args=(world_size,), nprocs=world_size)")
    centres = []
    for rank in range(world_size):
        x = 0.1 + 1.6 * rank
        centres.append(x + 0.7)
        _box(ax, x, 2.1, 1.4, 0.65, f"process\nrank {rank}: fn({rank}, {world_size})", RANK_COLOURS[rank])
        _arrow(ax, (width / 2, 3.3), (x + 0.7, 2.75))
    # env:// makes rank 0 serve the store unless the launcher serves it (torch/distributed/rendezvous.py,
    # _create_c10d_store: TORCHELASTIC_USE_AGENT_STORE, which torchrun sets).
    _box(ax, width / 2 - 1.9, 0.95, 3.8, 0.65,
         "store: TCPStore at MASTER_ADDR:MASTER_PORT\n(under mp.spawn, rank 0 serves it)", "#ffffcc")
    for centre in centres:
        _arrow(ax, (centre, 2.1), (width / 2, 1.6), linestyle="dashed")
    ax.text(width / 2 + 2.0, 1.27, "1. every rank registers here\n    and reads the others' addresses",
            fontsize=8, va="center")  # beside the store, where the dashed arrows end
    # 2. the process group: gloo links every pair of ranks over TCP (nccl's links differ)
    y = 0.2
    for i, a in enumerate(centres):
        ax.add_patch(FancyBboxPatch((a - 0.35, y - 0.15), 0.7, 0.3, facecolor=RANK_COLOURS[i], **_BOX))
        ax.text(a, y, f"rank {i}", ha="center", va="center", fontsize=8)
        for b in centres[i + 1:]:
            ax.annotate("", xy=(b - 0.35, y), xytext=(a + 0.35, y),
                        arrowprops=dict(arrowstyle="<->", color="grey", connectionstyle="arc3,rad=0.35"))
    ax.text(centres[-1] + 0.45, y, "2. process group: with gloo, a direct link\n    between every pair of ranks;\n"
            "    the collectives run over these links", fontsize=8, va="center")  # beside the last rank
    # the launcher's and store's boxes are wider than 2 ranks; the notes stand right of the store and the last rank
    ax.set_xlim(min(-0.1, width / 2 - 2.3), max(width / 2 + 4.7, centres[-1] + 3.0))
    ax.set_ylim(-0.3 if world_size <= 2 else -1.1, 5.0)  # the arcs between far ranks bend lower
    ax.axis("off")
    ax.set_title(f"What runs where: one notebook, one launcher, {world_size} processes, one group")
    fig.tight_layout()
    return fig


def plot_live_ranks(world_size: int = 4) -> Figure:
    """%ranks: the kernel sends each %%ranks cell's source text to long-lived rank processes."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 1.6 * world_size
    _box(ax, width / 2 - 1.6, 2.5, 3.2, 0.6, "notebook kernel: sends each %%ranks cell's text", "#f0f0f0")
    for rank in range(world_size):
        x = 0.1 + 1.6 * rank
        _box(ax, x, 0.9, 1.4, 0.8, f"rank {rank}\nruns the text;\nkeeps its variables", RANK_COLOURS[rank])
        _arrow(ax, (width / 2, 2.5), (x + 0.7, 1.7))
    ax.text(width / 2, 0.45, "the processes stay up between cells, until %ranks stop", ha="center", fontsize=9)
    ax.text(width / 2, 0.05, "only the cell's text is sent: no file needed, unlike mp.spawn", ha="center",
            fontsize=9)
    ax.set_xlim(-0.1, width)
    ax.set_ylim(-0.2, 3.3)
    ax.axis("off")
    ax.set_title(f"%ranks {world_size}: one kernel drives {world_size} live processes")
    fig.tight_layout()
    return fig


def plot_ddp_collectives(world_size: int = 4) -> Figure:
    """DDP's two collectives: a broadcast of rank 0's weights in DDP(...), an all-reduce in each backward()."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    steps = [("1. DDP(model): broadcast", "weights\nW{r}", "weights\nW0", "rank 0's weights copied to all"),
             ("2. loss.backward(): all-reduce", "gradient\ng{r}", "gradient\nmean(g)",
              "every rank gets the sum of g/world_size, the mean; this box is no process")]
    middle = (world_size - 0.2) / 2  # the height of the all-reduce's "mean" box
    half = min(0.8, middle)  # half the mean box's height
    for panel, (ax, (title, before, after, note)) in enumerate(zip(axes, steps)):
        if panel == 1:  # every rank's gradient goes into one mean, which every rank gets back
            _box(ax, 1.4, middle - half, 0.9, 2 * half, f"sum of\ng/{world_size}\n= mean", "#f0f0f0")
        for rank in range(world_size):
            y = world_size - 1 - rank
            _box(ax, 0.0, y, 1.1, 0.8, before.format(r=rank), RANK_COLOURS[rank])
            _box(ax, 2.6, y, 1.1, 0.8, after, RANK_COLOURS[rank])
            if panel == 0:  # the broadcast fans out from rank 0's box, the top row
                _arrow(ax, (1.15, world_size - 0.6), (2.55, y + 0.4))
            else:  # each arrow meets the mean box's edge at its rank's height, kept inside the box
                edge = min(max(y + 0.4, middle - half + 0.1), middle + half - 0.1)
                _arrow(ax, (1.15, y + 0.4), (1.38, edge))
                _arrow(ax, (2.32, edge), (2.55, y + 0.4))
        ax.text(1.85, -0.45, note, ha="center", fontsize=9)
        ax.set_xlim(-0.1, 3.8)
        ax.set_ylim(-0.7, world_size)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
    fig.suptitle("The two collectives DDP runs, one row per rank")
    fig.tight_layout()
    return fig


def plot_pickle_by_name() -> Figure:
    """mp.spawn sends a function as its module and name: found in a file, not in a notebook's __main__."""
    fig, ax = plt.subplots(figsize=(10, 3.2))
    rows = ((2.1, "notebook cell\ndef hello", "('__main__', 'hello')", "new Python:\nimport __main__",
             "no hello\nfails", "#ffcccc"),
            (0.6, "my_work/classic_ddp.py\ndef demo_basic", "('my_work.classic_ddp',\n'demo_basic')",
             "new Python:\nimport my_work.classic_ddp", "demo_basic\nruns", "#ccffcc"))
    for y, source, message, child, outcome, colour in rows:
        _box(ax, 0.0, y, 2.2, 0.8, source, "#dddddd")
        _box(ax, 3.0, y, 2.2, 0.8, message, "#ffffcc")
        _box(ax, 6.0, y, 2.4, 0.8, child, "#ddeeff")
        _box(ax, 9.2, y, 1.4, 0.8, outcome, colour)
        _arrow(ax, (2.2, y + 0.4), (3.0, y + 0.4))
        _arrow(ax, (5.2, y + 0.4), (6.0, y + 0.4))
        _arrow(ax, (8.4, y + 0.4), (9.2, y + 0.4))
    ax.text(4.1, 3.05, "what mp.spawn sends: a module and a name, no code", ha="center", fontsize=9)
    ax.set_xlim(-0.1, 10.7)
    ax.set_ylim(0.4, 3.3)
    ax.axis("off")
    ax.set_title("mp.spawn sends a function by name")
    fig.tight_layout()
    return fig


def plot_busy_port(port: int = 12355) -> Figure:
    """A leftover rank 0 still listens on the port, so the new rank 0 cannot listen there, and the
    new rank 1, a client, connects to the leftover's store and writes keys there."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    _box(ax, 0.0, 1.3, 2.6, 0.8, "leftover rank 0\n(an earlier run, still alive)", "#dddddd")
    _box(ax, 3.4, 1.3, 1.6, 0.8, f"port {port}\nthe leftover's\nstore listens", "#ffffcc")
    _box(ax, 5.8, 1.3, 2.6, 0.8, "new rank 0\nwants to serve the store", RANK_COLOURS[0])
    _box(ax, 5.8, 2.4, 2.6, 0.7, "new rank 1\na client of the store", RANK_COLOURS[1])
    _arrow(ax, (2.6, 1.7), (3.4, 1.7))
    _arrow(ax, (5.8, 1.7), (5.0, 1.7))
    _arrow(ax, (5.8, 2.75), (4.2, 2.1))
    ax.text(3.0, 1.85, "holds", ha="center", fontsize=8)
    ax.text(5.4, 1.85, "refused", ha="center", fontsize=8)
    ax.text(4.95, 2.45, "connects and writes\n(a new job joins an old store)", ha="right", va="bottom",
            fontsize=8)  # just left of its arrow
    ax.text(4.2, 0.7, "EADDRINUSE: one listener per port. Stop the leftover, or use another port.",
            ha="center", fontsize=9)
    ax.set_xlim(-0.1, 8.5)
    ax.set_ylim(0.4, 3.3)
    ax.axis("off")
    ax.set_title("Address already in use")
    fig.tight_layout()
    return fig


def plot_file_store(world_size: int = 2) -> Figure:
    """init_method="file://...": every rank reads and writes one shared file; no store listens on a port."""
    fig, ax = plt.subplots(figsize=(9, 3.0))
    width = 1.8 * world_size
    for rank in range(world_size):
        x = 0.1 + 1.8 * rank
        _box(ax, x, 1.7, 1.5, 0.7, f"rank {rank}\ninit_process_group", RANK_COLOURS[rank])
        ax.annotate("", xy=(width / 2, 0.95), xytext=(x + 0.75, 1.7),
                    arrowprops=dict(arrowstyle="<->", color="black"))
    _box(ax, width / 2 - 1.3, 0.35, 2.6, 0.6, "one file: some_file\nkeys the ranks write and read", "#ffffcc")
    ax.text(width + 0.2, 1.3, "no port, no MASTER_ADDR:\nthe ranks meet in the file.\n"
            "It must be new for each job.", fontsize=9, va="center")
    ax.set_xlim(-0.1, width + 3.0)
    ax.set_ylim(0.1, 2.6)
    ax.axis("off")
    ax.set_title(f"file:// : {world_size} ranks meet through one file")
    fig.tight_layout()
    return fig


def plot_gradient_average(world_size: int = 4) -> Figure:
    """One DDP step: each rank's own gradient, from its own batch, goes into one mean; every rank
    gets that mean and takes the same optimizer step."""
    fig, ax = plt.subplots(figsize=(9, 3.4))
    width = 1.6 * world_size
    for rank in range(world_size):
        x = 0.1 + 1.6 * rank
        _box(ax, x, 2.3, 1.4, 0.7, f"rank {rank}\nbatch {rank} → g{rank}", RANK_COLOURS[rank])
        _arrow(ax, (x + 0.7, 2.3), (width / 2, 1.8))
    terms = " + ".join(f"g{rank}" for rank in range(world_size))
    _box(ax, width / 2 - 1.9, 1.05, 3.8, 0.75,
         f"the all-reduce's result, on every rank: the sum of g/{world_size}\n= ({terms}) / {world_size}, the mean\n"
         "(the ranks compute it with each other: this box is no process)", "#f0f0f0")
    for rank in range(world_size):
        x = 0.1 + 1.6 * rank
        _arrow(ax, (width / 2, 1.05), (x + 0.7, 0.65))
        _box(ax, x, 0.05, 1.4, 0.6, "w - lr × mean", RANK_COLOURS[rank])
    ax.set_xlim(-0.1, width)
    ax.set_ylim(-0.1, 3.1)
    ax.axis("off")
    ax.set_title(f"{world_size} ranks: own gradients → one mean → the same step on every rank")
    fig.tight_layout()
    return fig


def plot_threads_on_cores(cores: int = 2, world_size: int = 2, default_threads: int | None = None) -> Figure:
    """CPU threads on cores, two panels. Left, under torch's mp.spawn: each rank keeps torch's default thread
    count, ``default_threads`` (``cores`` if None), all ranks sharing ``cores`` cores. Right, after each rank
    calls ``torch.set_num_threads(max(1, min(default_threads, cores // world_size)))``: one per core, or fewer."""
    default = cores if default_threads is None else default_threads
    per_rank = max(1, min(default, cores // world_size))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
    verdict = ": they take turns" if world_size * default > cores else ""
    panels = ((axes[0], default, f"under mp.spawn: {default} threads per rank\n"
               f"{world_size * default} threads on {cores} cores{verdict}"),
              (axes[1], per_rank, f"after torch.set_num_threads({per_rank}) in each rank\n"
               f"{world_size * per_rank} threads on {cores} cores"))
    for ax, threads, title in panels:
        width = 1.7 * world_size
        core_width = width / cores
        for core in range(cores):
            _box(ax, core * core_width + 0.1, 0.1, core_width - 0.2, 0.5, f"core {core}", "#f0f0f0")
        thread = 0
        for rank in range(world_size):
            x = 0.1 + 1.7 * rank
            _box(ax, x, 1.9, 1.5, 0.5, f"rank {rank}", RANK_COLOURS[rank])
            for t in range(threads):
                tx = x + (t + 0.5) * 1.5 / threads
                ax.add_patch(FancyBboxPatch((tx - 0.25, 1.15), 0.5, 0.35, facecolor=RANK_COLOURS[rank], **_BOX))
                ax.text(tx, 1.325, "thread", ha="center", va="center", fontsize=7)
                ax.annotate("", xy=(tx, 1.5), xytext=(tx, 1.9), arrowprops=dict(arrowstyle="-", color="black"))
                core = thread % cores  # the system spreads the threads over the cores
                _arrow(ax, (tx, 1.15), (core * core_width + core_width / 2, 0.6))
                thread += 1
        ax.set_xlim(-0.1, width + 0.1)
        ax.set_ylim(0.0, 2.5)
        ax.axis("off")
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{world_size} ranks on a CPU with {cores} cores")
    fig.tight_layout()
    return fig


def plot_device_ids_move(gpu: int = 0) -> Figure:
    """One rank's forward pass on a GPU machine, two rows. With ``device_ids=[gpu]``, DDP moves the
    input made on the CPU to ``cuda:gpu``, where the model is; with ``device_ids=None``, it passes the
    input on as it is, and the model fails on a tensor on another device."""
    fig, ax = plt.subplots(figsize=(9, 2.9))
    rows = ((1.6, f"device_ids=[{gpu}]", f"moved to\ncuda:{gpu}", "the model runs", "#d9ead3"),
            (0.3, "device_ids=None", "passed on as it is:\nstill on the CPU", "error: the input\nis on another device",
             "#f4cccc"))
    for y, device_ids, moved, outcome, colour in rows:
        _box(ax, 0.0, y, 1.5, 0.8, "input\nmade on the CPU", "#f0f0f0")
        _box(ax, 2.0, y, 1.9, 0.8, f"DDP(model,\n{device_ids})", RANK_COLOURS[0])
        _box(ax, 4.4, y, 1.9, 0.8, moved, "#f0f0f0")
        _box(ax, 6.8, y, 1.6, 0.8, f"model\non cuda:{gpu}", RANK_COLOURS[0])
        for start, end in ((1.5, 2.0), (3.9, 4.4), (6.3, 6.8)):
            _arrow(ax, (start, y + 0.4), (end, y + 0.4))
        ax.text(8.55, y + 0.4, outcome, va="center", fontsize=8,
                bbox=dict(boxstyle="round", facecolor=colour, edgecolor="none"))
    ax.set_xlim(-0.1, 10.0)
    ax.set_ylim(0.1, 2.6)
    ax.axis("off")
    ax.set_title(f"One rank's forward pass on a GPU machine: device_ids moves the input to cuda:{gpu}")
    fig.tight_layout()
    return fig
