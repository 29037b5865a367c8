"""Pictures for lesson 02: how ranks are started, who serves the store, how errors and results come back."""

from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.shapes import arrow, box


def plot_start_times(times: dict[str, list[float]], nprocs: int = 2) -> Figure:
    """A row per start method: each measured launch as a dot and the median as a tick, with its
    value written beside it (log scale: no bars, whose lengths a log axis would distort)."""
    methods = list(times)
    fig, ax = plt.subplots(figsize=(6, 0.6 + 0.5 * len(methods)))
    medians = [statistics.median(times[m]) for m in methods]
    ax.set_yticks(range(len(methods)), methods)
    for y, method in enumerate(methods):
        ax.plot(times[method], [y] * len(times[method]), "k.", markersize=6)
        ax.plot([medians[y]], [y], "|", color="tab:blue", markersize=16, markeredgewidth=2)
        right = max(medians[y], *times[method])  # the label sits right of every dot, not on one
        ax.annotate(f"{medians[y]:.2f} s", (right, y), xytext=(6, 0), textcoords="offset points", va="center")
    ax.set_xscale("log")
    ax.set_xlim(right=4 * max(max(seconds) for seconds in times.values()))  # room for the last label
    ax.set_xlabel(f"seconds to start {nprocs} processes and join them (log scale)")
    ax.set_ylabel("start method")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def plot_shared_model(nprocs: int = 2, lr: float = 0.1, gradient: float = 4) -> Figure:
    """A model passed in ``args`` under spawn or forkserver: its weight sits once in shared memory, and
    each rank's SGD step (-lr x gradient) lands on that one copy; no rank gets a copy of its own."""
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 4)
    ax.axis("off")
    step = round(-lr * gradient, 4)
    box(ax, 3.0, 0.3, 4.0, 1.0, f"the kernel's weight, in shared memory\n0 -> {round(nprocs * step, 4):g} "
        f"after {nprocs} steps", "#fff3d6")
    for i in range(nprocs):
        x = 1.0 + i * 5.4 / (nprocs - 1) if nprocs > 1 else 3.7
        box(ax, x, 2.6, 2.6, 0.8, f"rank {i}\nSGD step {step:g}", "white")
        ax.text(x + 0.5, 1.85, "no own copy", ha="center", va="center", fontsize=8, color="tab:red",
                bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="tab:red"))
        arrow(ax, (x + 1.3, 2.6), (5.0, 1.3), "tab:blue")
    fig.tight_layout()
    return fig


def plot_pickled_worker(module: str = "my_work.lesson02_hello", name: str = "hello", nprocs: int = 2,
                        fails: bool = False) -> Figure:
    """The parent sends each child the worker, as (module, name), with i and args, from a loop over the ranks; each
    child imports the module and looks the name up before calling fn(i, *args). With ``fails``,
    the lookup is drawn as the step that fails (a notebook's ``__main__`` worker in a fresh Python)."""
    fig, ax = plt.subplots(figsize=(9.5, 1.2 + 1.1 * nprocs))  # wide enough for a long module name
    ax.set_xlim(0, 11.2)
    ax.set_ylim(-0.6, nprocs - 0.2)
    ax.axis("off")
    box = dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor="tab:blue")
    middle = (nprocs - 1) / 2
    ax.text(3.3, middle, "parent (the notebook)\n\nfor i in range(nprocs):\n  start child i with\n"
            f"  pickle.dumps((fn, i, args)),\n  fn as ('{module}', '{name}')",
            ha="right", va="center", multialignment="left", family="monospace", fontsize=8.5, bbox=box)
    colour = "tab:red" if fails else "tab:green"
    for i in range(nprocs):
        y = nprocs - 1 - i
        ax.annotate("", xy=(5.35, y), xytext=(3.4, middle), arrowprops=dict(arrowstyle="->", color="tab:blue"))
        ax.text(4.35, (y + middle) / 2 + 0.12, f"i = {i}", ha="center", fontsize=8.5, color="tab:blue")
        lookup = f"fn = {module}.{name}" + ("   <- fails: no such name" if fails else "")
        run = f"fn({i}, *args)" + ("   never runs" if fails else "")
        child = ax.text(5.45, y, f"child {i} (a fresh Python)\nimport {module}\n{lookup}\n{run}",
                        ha="left", va="center", multialignment="left", family="monospace", fontsize=8.5,
                        bbox=dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor=colour))
        if fails:
            child.set_color("tab:red")
    ax.text(5.6, nprocs - 0.45, "a function travels as its module and name, not its code: "
            "each child must be able to import it", ha="center", fontsize=9)
    fig.tight_layout()
    return fig


def plot_start_method_trees(nprocs: int = 2) -> Figure:
    """Who starts each rank under the three start methods, and what each rank begins with."""
    panels = [
        ("spawn", "notebook kernel", None, "a fresh Python:\nimports torch\nand your module"),
        ("fork", "notebook kernel", None, "a copy of the kernel:\nits memory, locks,\nhalf-done work"),
        ("forkserver", "notebook kernel", "forkserver (started once):\nimports torch once,\nif preloaded",
         "a copy of the server:\nwhat it imported,\nthe server's environment"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, (method, parent, server, child) in zip(axes, panels):
        ax.set_xlim(0, 4)
        ax.set_ylim(0, 4)
        ax.axis("off")
        ax.set_title(f"start_method={method!r}", fontsize=10, family="monospace")
        box = dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="tab:blue")
        ax.text(2, 3.6, parent, ha="center", va="center", fontsize=8.5, bbox=box)
        top = 3.35
        if server:
            ax.text(2, 2.55, server, ha="center", va="center", fontsize=8,
                    bbox=dict(boxstyle="round,pad=0.3", facecolor="#fff3d6", edgecolor="tab:orange"))
            ax.annotate("", xy=(2, 2.95), xytext=(2, 3.4), arrowprops=dict(arrowstyle="->"))
            top = 2.15
        for i in range(nprocs):
            x = 1 + 2 * i / max(1, nprocs - 1) if nprocs > 1 else 2
            ax.annotate("", xy=(x, 1.35), xytext=(2, top), arrowprops=dict(arrowstyle="->", color="tab:green"))
            ax.text(x, 0.85, f"rank {i}", ha="center", va="center", fontsize=8.5,
                    bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="tab:green"))
        ax.text(2, 0.15, child, ha="center", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def plot_fork_with_lock() -> Figure:
    """fork copies the parent's memory, a held lock included, but only the thread that called fork:
    in the child the lock stays held, and the thread that would release it does not exist."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 2.6))
    panels = (("parent: 2 threads", [("main thread: calls fork()", "tab:blue"),
                                     ("background thread: holds the lock", "tab:orange")]),
              ("child: a copy with 1 thread", [("main thread: wants the lock ... waits", "tab:blue"),
                                              ("(background thread not copied)", "lightgrey")]))
    for ax, (title, threads) in zip(axes, panels):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 4)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
        for y, (text, colour) in zip((3.0, 1.9), threads):
            ax.text(5, y, text, ha="center", va="center", fontsize=8.5,
                    bbox=dict(boxstyle="round,pad=0.4", facecolor="white", edgecolor=colour))
        ax.text(5, 0.6, "memory: lock = HELD", ha="center", va="center", fontsize=9, family="monospace",
                bbox=dict(boxstyle="round,pad=0.4", facecolor="#fde0dd", edgecolor="tab:red"))
    fig.text(0.5, 0.45, "fork\n→", ha="center", va="center", fontsize=11)
    fig.tight_layout()
    return fig


def plot_who_serves_the_store(nprocs: int = 2) -> Figure:
    """Who serves the store, side by side: under ``mp.spawn`` with ``init_method`` env:// (the
    default), rank 0's ``init_process_group`` serves it on MASTER_PORT and the other ranks connect;
    under torchrun the agent, torchrun's own process, serves it and starts the ranks with RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT in their environment. The agent picks a free port in
    recent torch (2.13); older releases default to 29500."""
    fig, (spawn_ax, torchrun_ax) = _two_panels(
        ("python ddp_basic.py 2  (mp.spawn)", "torchrun --nproc-per-node 2 ddp_basic.py"), 4.4, (10, 3.4), 9.5)
    # mp.spawn: the script's process starts the ranks; rank 0's init_process_group serves the store,
    # drawn to the ranks' side so that no arrow crosses it, each rank's arrow labelled.
    box(spawn_ax, 0.1, 1.6, 2.7, 1.2, "python ddp_basic.py\nfree port ->\nMASTER_PORT", "#eeeeee")
    box(spawn_ax, 6.6, 1.6, 3.3, 1.2, "store on MASTER_PORT\n(served by rank 0's\ninit_process_group)", "#d9ead3")
    spawn_ax.text(2.95, 2.2, "starts", fontsize=8, ha="left", va="center", color="#b07000")
    for i, (y, label) in enumerate(zip((3.0, 0.4), ("serves it", "connects"))):
        if i >= nprocs:
            break
        box(spawn_ax, 3.7, y, 2.1, 0.8, f"rank {i}", "#cfe2f3")
        arrow(spawn_ax, (2.8, 2.2 + (0.4 if i == 0 else -0.4)), (3.7, y + 0.4), "#b07000")
        arrow(spawn_ax, (5.8, y + 0.4), (6.6, 2.2 + (0.3 if i == 0 else -0.3)), "tab:blue",
              "<|-|>" if i == 0 else "-|>")
        spawn_ax.text(6.2, y + (0.95 if i == 0 else -0.15), label, fontsize=8, ha="center",
                      va="bottom" if i == 0 else "top", color="tab:blue")
    # torchrun: the agent picks a free port, serves the store there, then starts the ranks.
    box(torchrun_ax, 0.3, 3.3, 4.2, 0.8, "agent (torchrun's process)\npicks a free port (recent torch)", "#fde9c9")
    box(torchrun_ax, 5.6, 3.3, 4.1, 0.8, "store on MASTER_PORT\n(served by the agent)", "#d9ead3")
    arrow(torchrun_ax, (4.5, 3.7), (5.6, 3.7), "#b07000")
    torchrun_ax.text(5.05, 3.85, "serves", fontsize=7.5, ha="center", color="#b07000")
    for i in range(nprocs):
        x = 0.6 + 5.0 * i
        box(torchrun_ax, x, 0.2, 3.6, 0.8, f"rank {i}\nRANK={i}, MASTER_PORT, ...", "#cfe2f3")
        arrow(torchrun_ax, (2.4, 3.3), (x + 1.8, 1.0), "#b07000")
        arrow(torchrun_ax, (x + 2.6, 1.0), (7.6, 3.3), "tab:blue")
    torchrun_ax.text(1.0, 2.0, "starts, with\nthe environment", fontsize=8, color="#b07000")
    torchrun_ax.text(7.9, 2.2, "every rank\nconnects", fontsize=8, color="tab:blue")
    fig.tight_layout()
    return fig


def plot_error_and_return_paths() -> Figure:
    """How a child's exception and its return value reach the parent. Under torch's ``mp.spawn`` the
    child writes its traceback as text to a file, exits with code 1, and the parent reads the file and
    raises ProcessRaisedException; a return value is dropped. ``ddp_lib.mp.labelled_spawn``'s child sends either
    one back through a pipe."""
    fig, (torch_ax, ddp_lib_ax) = _two_panels(("torch's mp.spawn", "ddp_lib.mp.labelled_spawn"), 4, (10, 3.2), 10)
    box(torch_ax, 0.2, 2.6, 3.0, 1.0, "child i\nfn(i, *args)", "#cfe2f3")
    box(torch_ax, 3.9, 2.6, 2.3, 1.0, "a temporary\nerror file", "#fff3d6")
    box(torch_ax, 6.9, 2.6, 2.9, 1.0, "parent\nraises Process-\nRaisedException", "#fde9c9")
    arrow(torch_ax, (3.2, 3.1), (3.9, 3.1), "tab:red")
    torch_ax.text(3.55, 2.5, "raises:\ntraceback\nas text", fontsize=7.5, ha="center", va="top", color="tab:red")
    arrow(torch_ax, (6.2, 3.1), (6.9, 3.1), "tab:red")
    torch_ax.text(6.55, 2.5, "exit 1:\nread it", fontsize=7.5, ha="center", va="top", color="tab:red")
    box(torch_ax, 0.2, 0.3, 3.0, 1.0, "child i\nreturns a value", "#cfe2f3")
    box(torch_ax, 6.9, 0.3, 2.9, 1.0, "parent: mp.spawn\nreturns None", "#fde9c9")
    arrow(torch_ax, (3.2, 0.8), (4.6, 0.8), "grey")
    torch_ax.text(5.3, 0.8, "dropped", fontsize=9, ha="center", va="center", color="grey")
    box(ddp_lib_ax, 0.2, 1.5, 3.0, 1.2, "rank r\nfn(r, *args)", "#cfe2f3")
    box(ddp_lib_ax, 6.9, 1.5, 2.9, 1.2, "parent\nreturns [values]\nor raises\nRankRaisedError", "#fde9c9")
    arrow(ddp_lib_ax, (3.2, 2.4), (6.9, 2.4), "tab:green")
    ddp_lib_ax.text(5.05, 2.6, "a pipe: (\"ok\", value)", fontsize=8, ha="center", color="tab:green")
    arrow(ddp_lib_ax, (3.2, 1.8), (6.9, 1.8), "tab:red")
    ddp_lib_ax.text(5.05, 1.35, "or (\"error\", type, message, traceback)", fontsize=8, ha="center", va="top",
                    color="tab:red")
    fig.tight_layout()
    return fig


def _two_panels(titles: tuple[str, str], height: float, figsize: tuple[float, float],
                fontsize: float) -> tuple[Figure, tuple]:
    """A figure of two blank panels, 10 wide and ``height`` tall, titled in monospace, for box drawings."""
    fig, axes = plt.subplots(1, 2, figsize=figsize)
    for ax, title in zip(axes, titles):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, height)
        ax.axis("off")
        ax.set_title(title, fontsize=fontsize, family="monospace")
    return fig, tuple(axes)
