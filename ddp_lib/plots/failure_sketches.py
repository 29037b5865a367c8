"""Lesson 07's schematics, drawn before each run: what a killed rank, a stray collective in a DDP
loop and mismatched shapes do to the other ranks. Nothing here is measured."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ddp_lib.plots.shapes import arrow, box

SURVIVOR, DEAD, WAITING = "#8dd3c7", "#fb8072", "#fdb462"


def _lanes(ax, names: list[str]) -> None:
    ax.set_yticks(range(len(names)), list(reversed(names)))
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


def plot_dead_rank(world_size: int = 4) -> Figure:
    """Every rank all-reduces in a loop; rank 1 is killed; every survivor raises well before the group's
    timeout, its connection closed."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * world_size))
    for rank in range(world_size):
        y = world_size - 1 - rank
        if rank == 1:
            ax.barh(y, 3, left=0, color=DEAD, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(3, y, "kX", markersize=14)
            ax.text(3.15, y, "SIGKILL: gone, no exception", va="center", fontsize=9)
        else:
            ax.barh(y, 3.3, left=0, color=SURVIVOR, edgecolor="black")
            ax.text(1.5, y, "all_reduce loop", ha="center", va="center")
            ax.plot(3.3, y, "rX", markersize=12)
            ax.text(3.45, y, "raises well before the timeout: connection closed", color="red", va="center",
                    fontsize=9)
    ax.axvline(3, color="grey", linestyle=":")
    ax.set_xlim(0, 9)
    ax.set_xlabel("time (a sketch: the cell below measures it); at the latest, the group's timeout")
    _lanes(ax, [f"rank {r}" for r in range(world_size)])
    ax.set_title("A rank killed while the others wait in a collective: what they see")
    fig.tight_layout()
    return fig


def plot_loop_collision() -> Figure:
    """Rank 0's metric all_reduce (1 number) meets rank 1's next collective, DDP's bucket-rebuild
    broadcast in step 1's forward. Both are the group's 5th collective, but of different kinds, so gloo
    does not match them: each rank waits for data the other never sends."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3)
    ax.axis("off")
    box(ax, 0.2, 1.9, 2.6, 0.7, "rank 0: step, then\nif rank == 0: metric", SURVIVOR)
    box(ax, 3.4, 1.9, 3.0, 0.7, "all_reduce(metric)\n1 number", WAITING)
    box(ax, 0.2, 0.4, 2.6, 0.7, "rank 1: next step's\nforward", SURVIVOR)
    box(ax, 3.4, 0.4, 3.0, 0.7, "DDP's bucket rebuild:\nbroadcast from rank 0", WAITING)
    arrow(ax, (4.9, 1.9), (4.9, 1.1), "red", "<|-|>")
    ax.text(5.0, 1.5, "same number (5th), different kinds: not matched, each waits", color="red", fontsize=8,
            va="center")
    ax.text(6.7, 2.25, "waits for 1 number", fontsize=8, va="center")
    ax.text(6.7, 0.75, "waits for rank 0's data", fontsize=8, va="center")
    ax.set_title("A metric all_reduce on rank 0 alone, inside a DDP training loop", fontsize=10)
    fig.tight_layout()
    return fig


def two_rank_ring(longer: list[float], shorter: list[float]) -> tuple[list[float] | str, list[list[float]], list[int]]:
    """gloo's ring all-reduce on 2 ranks, rank 0 holding ``longer``, rank 1 ``shorter`` (float32),
    as its source reads: each rank cuts its tensor into 4 segments of ceil(n / 4) numbers, the last
    ones possibly empty. A reduce step sends the segments the other rank owns (rank 0 owns 0 and 1,
    rank 1 owns 2 and 3), which adds them; a share step sends the owned sums back. Each rank reads its
    peer's messages in the order they were sent, into the next segment it expects, none matched by
    position; a message longer than that segment aborts. Returns rank 1's result ("waits" or
    "aborts" if it does not finish), the messages rank 0 sends, in order, and the segment rank 1 reads
    each message it reads into."""
    def segments(values):
        size = -(-len(values) // 4)
        return [list(values[i * size:(i + 1) * size]) for i in range(4)]

    held = [segments(longer), segments(shorter)]
    ops = [[("send", ((r + 1) * 2 + i) % 4) for i in (0, 1)] + [("add", ((r + 2) * 2 + i) % 4) for i in (0, 1)]
           + [("send", (r * 2 + i) % 4) for i in (0, 1)] + [("copy", ((r + 1) * 2 + i) % 4) for i in (0, 1)]
           for r in (0, 1)]
    ops = [[(kind, s) for kind, s in ops[r] if held[r][s]] for r in (0, 1)]  # an empty segment: no message
    queues, done, state = [[], []], [0, 0], ["waits", "waits"]  # queues[r]: messages sent to rank r
    sent, reads = [], []
    progress = True
    while progress:
        progress = False
        for r in (0, 1):
            while done[r] < len(ops[r]) and state[r] == "waits":
                kind, s = ops[r][done[r]]
                if kind == "send":
                    queues[1 - r].append(list(held[r][s]))
                    if r == 0:
                        sent.append(list(held[r][s]))
                elif not queues[r]:
                    break  # waits for a message from its peer
                else:
                    message = queues[r].pop(0)
                    if r == 1:
                        reads.append(s)
                    if len(message) > len(held[r][s]):
                        state[r] = "aborts"
                        break
                    for i, value in enumerate(message):
                        held[r][s][i] = held[r][s][i] + value if kind == "add" else value
                done[r] += 1
                progress = True
            if done[r] == len(ops[r]):
                state[r] = "finished"
    result = [value for segment in held[1] for value in segment] if state[1] == "finished" else state[1]
    return result, sent, reads


def plot_mismatched_shapes(longer: list[float] = (1.0, 2.0, 3.0), shorter: list[float] = (10.0, 20.0)) -> Figure:
    """Rank 0 all-reduces ``longer``, rank 1 ``shorter``, on gloo: each rank's 4 segments (empty ones
    white), and the messages rank 0 sends, in the order rank 1 reads them (``two_rank_ring``)."""
    def listed(values) -> str:
        return "[" + ", ".join(f"{value:g}" for value in values) + "]"

    gets, sent, reads = two_rank_ring(longer, shorter)  # the defaults: rank 1 finishes, rank 0 waits
    fig, ax = plt.subplots(figsize=(10, 3.2))
    ax.set_xlim(0, 13)
    ax.set_ylim(0, 3.6)
    ax.axis("off")
    left = 2.3  # the first box, right of the row labels
    for y, name, values in ((2.8, "rank 0", longer), (0.2, "rank 1", shorter)):
        ax.text(0.1, y + 0.3, f"{name}: {listed(values)}", fontsize=9, va="center")
        size = -(-len(values) // 4)
        for s in range(4):
            part = values[s * size:(s + 1) * size]
            box(ax, left + s * 1.0, y, 0.9, 0.6, listed(part) if part else "empty", SURVIVOR if part else "white")
    ax.text(left + 4.1, 3.1, "segments 0-3; rank 1 sends its segments 0 and 1, rank 0 adds them.\n"
            "rank 0 then waits for a segment 2 rank 1 never sends, and fails when rank 1 exits",
            color="red", fontsize=8, va="center")
    ax.text(0.1, 1.55, "rank 0 sends,\nin this order:", fontsize=8, va="center")
    for i, message in enumerate(sent):
        box(ax, left + i * 1.0, 1.25, 0.9, 0.6, listed(message), WAITING)
    for i, segment in enumerate(reads):  # rank 1's i-th read takes rank 0's i-th message
        arrow(ax, (left + i * 1.0 + 0.45, 1.25), (left + segment * 1.0 + 0.45, 0.8), "red")
    ax.text(left + 3.1, 1.55, "reduce step: rank 0's segment 2, which rank 1 does not expect;\n"
            "share step: the sums. rank 1 reads the messages in order, into its segments 0 and 1",
            fontsize=8, va="center")
    right = ", ".join(f"{a + b:g}" for a, b in zip(longer, shorter))
    ax.text(left + 4.1, 0.5, f"rank 1 gets {listed(gets)}, not [{right}]: wrong, and no error", fontsize=9,
            va="center")
    ax.set_title("all_reduce with different shapes: messages are read in the order sent, not by position",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_skipped_backward(steps: int = 4, skipped: int = 1) -> Figure:
    """Rank 1 skips ``backward()`` at step ``skipped``: each rank's n-th gradient all-reduce meets the
    other's n-th, so from there rank 0's step k meets rank 1's step k + 1; rank 0's last has no partner."""
    fig, ax = plt.subplots(figsize=(9, 2.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 2.8)
    ax.axis("off")
    ax.text(0.1, 2.1, "rank 0", fontsize=9, va="center")
    ax.text(0.1, 0.6, "rank 1", fontsize=9, va="center")
    ones = [k for k in range(steps) if k != skipped]  # rank 1's all-reduces, in order
    for k in range(steps):
        x = 1.4 + k * 1.8
        box(ax, x, 1.8, 1.3, 0.6, f"step {k}", SURVIVOR)
        box(ax, x, 0.3, 1.3, 0.6, "skipped" if k == skipped else f"step {k}", "white" if k == skipped else SURVIVOR)
        if k < len(ones):  # rank 0's k-th all-reduce meets rank 1's k-th
            arrow(ax, (x + 0.65, 1.8), (1.4 + ones[k] * 1.8 + 0.65, 0.9), "black" if ones[k] == k else "red", "<|-|>")
    ax.text(1.4 + steps * 1.8, 2.1, "no partner:\n\"closed by peer\"", color="red", fontsize=8, va="center")
    ax.text(1.4 + steps * 1.8, 0.6, "finishes, exits", fontsize=8, va="center")
    ax.set_title(f"rank 1 skips backward() at step {skipped}: the all-reduces pair by order, one step apart",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_agent_stops_ranks(failing_rank: int = 1) -> Figure:
    """Under torchrun: ``failing_rank`` (0 or 1) raises and exits; its node's agent sees the exit,
    stops the other rank with SIGTERM, and prints a summary whose root cause is the first failure."""
    other = 1 - failing_rank
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 3.2)
    ax.axis("off")
    box(ax, 3.2, 2.2, 3.6, 0.8, "torchrun's agent\nwatches its ranks", "#bebada")
    box(ax, 0.6, 0.3, 2.8, 0.8, f"rank {other}: still working", SURVIVOR)
    box(ax, 6.6, 0.3, 2.8, 0.8, f"rank {failing_rank}: raises\n(@record writes error.json)", DEAD)
    arrow(ax, (7.6, 1.1), (6.2, 2.2), "red")
    ax.text(7.4, 1.7, "1. exits with code 1", color="red", fontsize=8)
    arrow(ax, (3.8, 2.2), (2.2, 1.1), "black")
    ax.text(0.2, 1.7, "2. SIGTERM: exit code -15", fontsize=8)
    ax.text(5.0, 0.05, f"3. the agent prints the summary: root cause = the first failure (rank {failing_rank})",
            ha="center", fontsize=8)
    ax.set_title("A rank that raises under torchrun: what the agent does", fontsize=10)
    fig.tight_layout()
    return fig


def plot_detail_check() -> Figure:
    """What TORCH_DISTRIBUTED_DEBUG=DETAIL adds before each collective: a monitored barrier that
    rank 0 runs, then two all-gathers of the collective's fingerprint, then the collective."""
    fig, ax = plt.subplots(figsize=(9, 2.2))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 2)
    ax.axis("off")
    steps = [("monitored barrier:\nrank 0 hears from each\nrank, answers each", WAITING),
             ("all_gather:\nthe fingerprint's\nlength", WAITING),
             ("all_gather:\nthe fingerprint\n(op, shapes, dtypes)", WAITING),
             ("the all_reduce\nyou called", SURVIVOR)]
    for i, (text, colour) in enumerate(steps):
        box(ax, 0.2 + i * 3, 0.5, 2.5, 1.1, text, colour)
        if i:
            arrow(ax, (i * 3 - 0.1, 1.05), (0.2 + i * 3, 1.05), "black")
    ax.text(4.6, 0.15, "added by DETAIL: a mismatch or a missing rank raises here", ha="center", fontsize=8)
    ax.set_title("One all_reduce under TORCH_DISTRIBUTED_DEBUG=DETAIL", fontsize=10)
    fig.tight_layout()
    return fig


def plot_unused_parameter() -> Figure:
    """A model whose forward skips one branch: that branch's parameters get no gradient, so their
    bucket is never ready, so never all-reduced, and the next forward finds the last reduction unfinished."""
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 3)
    ax.axis("off")
    box(ax, 0.2, 1.9, 2.6, 0.8, "used branch:\nforward uses it", SURVIVOR)
    box(ax, 0.2, 0.4, 2.6, 0.8, "unused branch:\nforward skips it", DEAD)
    box(ax, 3.8, 1.9, 2.6, 0.8, "gradients arrive:\nready", SURVIVOR)
    box(ax, 3.8, 0.4, 2.6, 0.8, "no gradient:\nnever ready", WAITING)
    arrow(ax, (2.8, 2.3), (3.8, 2.3), "black")
    arrow(ax, (2.8, 0.8), (3.8, 0.8), "grey")
    box(ax, 7.4, 1.1, 4.4, 0.9, "their bucket is never all-reduced:\nthe next forward raises", WAITING)
    arrow(ax, (6.4, 2.3), (7.4, 1.75), "black")
    arrow(ax, (6.4, 0.8), (7.4, 1.35), "red")
    ax.set_title("A parameter that gets no gradient, under DDP", fontsize=10)
    fig.tight_layout()
    return fig
