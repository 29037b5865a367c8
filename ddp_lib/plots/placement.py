"""Pictures for lesson 03: which GPU each rank uses when a job spans several nodes."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch


def plot_nodes_and_gpus(nodes: int = 2, gpus_per_node: int = 2) -> Figure:
    """One box per node, one per GPU inside it, labelled with the RANK and LOCAL_RANK of the
    process that uses it and the device name that process writes: cuda:LOCAL_RANK."""
    fig, ax = plt.subplots(figsize=(3.4 * nodes, 2.6))
    ax.set_xlim(0, 3.4 * nodes)
    ax.set_ylim(0, 2.6)
    ax.axis("off")
    for node in range(nodes):
        x0 = 0.15 + 3.4 * node
        ax.add_patch(FancyBboxPatch((x0, 0.15), 3.1, 2.1, boxstyle="round,pad=0.05",
                                    facecolor="whitesmoke", edgecolor="gray"))
        ax.text(x0 + 1.55, 2.05, f"node {node} (GROUP_RANK={node})", ha="center", fontsize=10, weight="bold")
        for local_rank in range(gpus_per_node):
            rank = node * gpus_per_node + local_rank
            gx = x0 + 0.15 + local_rank * 1.5
            ax.add_patch(FancyBboxPatch((gx, 0.35), 1.3, 1.45, boxstyle="round,pad=0.03",
                                        facecolor="white", edgecolor="tab:green"))
            ax.text(gx + 0.65, 1.08, f"GPU {local_rank}\n\nRANK={rank}\nLOCAL_RANK={local_rank}\n"
                    f"device: cuda:{local_rank}", ha="center", va="center", fontsize=9)
            if rank >= gpus_per_node:
                ax.text(gx + 0.65, 0.45, f"(cuda:{rank}: no such GPU)", ha="center", fontsize=7.5,
                        color="tab:red")
    fig.suptitle("GPUs are numbered per node: a rank's GPU is cuda:LOCAL_RANK, not cuda:RANK", fontsize=10)
    fig.tight_layout()
    return fig


def plot_visible_devices(physical: int = 4, visible: tuple[int, ...] = (2, 3),
                         process: str = "the process") -> Figure:
    """One node's physical GPUs (top row, numbered as nvidia-smi numbers them) and what a process
    started with CUDA_VISIBLE_DEVICES listing ``visible`` calls them (bottom row): cuda:0, cuda:1, ...
    in the order listed; the others do not exist for it. ``process`` names it in the title ("rank 1")."""
    fig, ax = plt.subplots(figsize=(1.5 * physical + 2.2, 2.7))
    ax.set_xlim(-2.2, 1.5 * physical)
    ax.set_ylim(0, 2.7)
    ax.axis("off")
    ax.text(-0.1, 2.0, "the machine", ha="right", va="center", fontsize=9)
    ax.text(-0.1, 0.55, "inside the\nprocess", ha="right", va="center", fontsize=9)
    for gpu in range(physical):
        seen = gpu in visible
        ax.add_patch(FancyBboxPatch((1.5 * gpu + 0.1, 1.7), 1.2, 0.6, boxstyle="round,pad=0.03",
                                    facecolor="white", edgecolor="tab:green" if seen else "lightgray"))
        ax.text(1.5 * gpu + 0.7, 2.0, f"GPU {gpu}", ha="center", va="center", fontsize=9,
                color="black" if seen else "gray")
    for index, gpu in enumerate(visible):
        ax.add_patch(FancyBboxPatch((1.5 * index + 0.1, 0.25), 1.2, 0.6, boxstyle="round,pad=0.03",
                                    facecolor="honeydew", edgecolor="tab:green"))
        ax.text(1.5 * index + 0.7, 0.55, f"cuda:{index}", ha="center", va="center", fontsize=9)
        ax.annotate("", xy=(1.5 * index + 0.7, 0.9), xytext=(1.5 * gpu + 0.7, 1.65),
                    arrowprops=dict(arrowstyle="->", color="tab:green"))
    listed = ",".join(map(str, visible))
    gpus = f"{len(visible)} GPU" + ("s" if len(visible) != 1 else "")
    fig.suptitle(f"CUDA_VISIBLE_DEVICES={listed}: {process} sees {gpus}, numbered from 0 "
                 "in the order listed", fontsize=10)
    fig.tight_layout()
    return fig


def _box(ax, x: float, y: float, w: float, h: float, text: str, colour: str = "white",
         edge: str = "gray", size: float = 8.5) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.03", facecolor=colour, edgecolor=edge))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], label: str = "",
           colour: str = "black") -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color=colour))
    if label:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.12, label, ha="center",
                fontsize=8, color=colour)


def _canvas(width: float, height: float):
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def plot_input_path() -> Figure:
    """Schematic of one rank's forward: an input made on the CPU goes into ddp_model(...); with
    device_ids=[i] DDP copies it to cuda:i first; with device_ids=None it reaches the module as it is,
    which is fine for a CPU model and an error for a model on cuda:i."""
    fig, ax = _canvas(10, 3.2)
    _box(ax, 0.1, 1.2, 1.7, 0.8, "input made\non the CPU\ntorch.randn(20, 10)", "whitesmoke")
    _box(ax, 2.5, 1.2, 1.8, 0.8, "ddp_model(input)\nDDP's forward")
    _box(ax, 5.4, 2.1, 2.0, 0.8, "copy to cuda:i", "honeydew", "tab:green")
    _box(ax, 5.4, 0.3, 2.0, 0.8, "passed on as it is", "whitesmoke")
    _box(ax, 8.3, 2.1, 1.6, 0.8, "module on cuda:i:\nruns", "honeydew", "tab:green")
    _box(ax, 8.3, 0.3, 1.6, 0.8, "cpu module: runs\ncuda:i module: error", "mistyrose", "tab:red")
    _arrow(ax, (1.85, 1.6), (2.45, 1.6))
    _arrow(ax, (4.35, 1.75), (5.35, 2.5), "device_ids=[i]", "tab:green")
    _arrow(ax, (4.35, 1.45), (5.35, 0.7), "device_ids=None", "gray")
    _arrow(ax, (7.45, 2.5), (8.25, 2.5))
    _arrow(ax, (7.45, 0.7), (8.25, 0.7))
    fig.suptitle("Where an input made on the CPU ends up: only device_ids=[i] moves it", fontsize=10)
    fig.tight_layout()
    return fig


def plot_backend_slots() -> Figure:
    """Schematic of section "nccl serves CUDA tensors only": a process group keeps one backend per
    device type, and a collective takes the backend of its tensor's device type. A "nccl" group has a
    slot for cuda only, so a CPU tensor finds none; a "cpu:gloo,cuda:nccl" group has a slot for each."""
    fig, ax = _canvas(10, 3.0)
    groups = (('init_process_group("nccl")', (("cpu", None), ("cuda", "nccl"))),
              ('init_process_group("cpu:gloo,cuda:nccl")', (("cpu", "gloo"), ("cuda", "nccl"))))
    for column, (title, slots) in enumerate(groups):
        x0 = 0.2 + 5.0 * column
        ax.text(x0 + 2.3, 2.75, title, ha="center", fontsize=9, weight="bold")
        _box(ax, x0 + 0.1, 1.7, 1.6, 0.7, "CPU tensor\nall_reduce(metric)", "whitesmoke")
        for row, (device_type, backend) in enumerate(slots):
            found = backend is not None
            _box(ax, x0 + 2.7, 1.7 - 1.2 * row, 1.8, 0.7, f"{device_type} -> {backend or 'no backend'}",
                 "honeydew" if found else "mistyrose", "tab:green" if found else "tab:red")
        ok = slots[0][1] is not None
        _arrow(ax, (x0 + 1.75, 2.05), (x0 + 2.65, 2.05), "runs" if ok else "error", "tab:green" if ok else "tab:red")
    fig.suptitle("A group keeps one backend per device type; a collective uses the one for its tensor's device",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_ranks_on_one_gpu() -> Figure:
    """Schematic of one node with two ranks and two GPUs: without torch.cuda.set_device both ranks'
    "cuda" is GPU 0 (nccl refuses: "Duplicate GPU detected"); with set_device(local_rank) each
    rank's "cuda" is its own GPU."""
    fig, ax = _canvas(10, 3.0)
    for column, (title, targets, colour) in enumerate((("without set_device", (0, 0), "tab:red"),
                                                       ("with set_device(local_rank)", (0, 1), "tab:green"))):
        x0 = 0.2 + 5.0 * column
        ax.text(x0 + 2.2, 2.75, title, ha="center", fontsize=9.5, weight="bold")
        for gpu in range(2):
            _box(ax, x0 + 0.4 + 2.2 * gpu, 0.25, 1.6, 0.7, f"GPU {gpu}", "white", "tab:green")
        for rank, gpu in enumerate(targets):
            _box(ax, x0 + 0.4 + 2.2 * rank, 1.8, 1.6, 0.7, f"rank {rank}\n\"cuda\" = cuda:{gpu}", "whitesmoke")
            _arrow(ax, (x0 + 1.2 + 2.2 * rank, 1.75), (x0 + 1.2 + 2.2 * gpu, 1.0), colour=colour)
    ax.text(2.4, 1.3, "Duplicate GPU\ndetected", ha="center", fontsize=8, color="tab:red")
    fig.suptitle("A fresh process's current device is cuda:0; set_device gives each rank its own GPU",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_checkpoint_locations() -> Figure:
    """Schematic: rank 0 saves from cuda:0, so the file tags every tensor "cuda:0"; loading without
    map_location puts every rank's copy on cuda:0; map_location=device puts it on the rank's own GPU."""
    fig, ax = _canvas(10, 3.2)
    _box(ax, 0.1, 1.2, 1.9, 0.8, "rank 0 saves\nfrom cuda:0", "whitesmoke")
    _box(ax, 2.7, 1.2, 1.9, 0.8, "checkpoint.pt\nevery tensor\ntagged \"cuda:0\"", "lightyellow")
    _arrow(ax, (2.05, 1.6), (2.65, 1.6), "torch.save")
    for row, (how, where, colour) in enumerate((("torch.load(path)", "every rank: cuda:0", "tab:red"),
                                                ("map_location=device", "rank r: cuda:r", "tab:green"))):
        y = 2.1 - 1.8 * row
        _box(ax, 5.6, y, 2.0, 0.8, how, "white")
        _box(ax, 8.2, y, 1.7, 0.8, where, "mistyrose" if row == 0 else "honeydew", colour)
        _arrow(ax, (4.65, 1.6), (5.55, y + 0.4))
        _arrow(ax, (7.65, y + 0.4), (8.15, y + 0.4), colour=colour)
    fig.suptitle("torch.load puts a tensor back where the file says it was, unless map_location says otherwise",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_device_id_effects() -> Figure:
    """Schematic of one rank under nccl, without and with ``init_process_group(device_id=...)``: when
    the communicator forms, at init or at the first collective."""
    fig, ax = _canvas(5.6, 3.3)
    steps = ("init_process_group", "first collective")
    rows = (("without device_id", ("group made;\nno communicator", "communicator formed\non the tensors' GPUs"),
             "whitesmoke", "gray"),
            ("with device_id=cuda:r", ("communicator formed\non cuda:r", "uses it"), "honeydew", "tab:green"))
    for column, step in enumerate(steps):
        ax.text(2.55 + 1.9 * column, 3.0, step, ha="center", fontsize=9, weight="bold")
    for row, (title, cells, colour, edge) in enumerate(rows):
        y = 1.75 - 1.45 * row
        ax.text(0.05, y + 0.4, title, fontsize=9, va="center")
        for column, text in enumerate(cells):
            _box(ax, 1.75 + 1.9 * column, y, 1.6, 0.8, text, colour, edge, size=8)
    fig.suptitle("When nccl forms the communicator", fontsize=10)
    fig.tight_layout()
    return fig
