"""Lesson 01's pictures: each rank's tensor before and after a collective, a barrier's timeline,
the ring all-reduce step by step, gloo's broadcast tree.

Values follow lesson 01's convention (rank r starts with 10 r + 1, ..., 10 r + N): a cell holding
a value one rank started with takes that rank's colour (its tens digit); a sum is grey.
Each function draws one pyplot figure and returns it (a notebook shows it at the end of the cell).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

RANK_COLOURS = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#ffffb3", "#bc80bd")
SUM_COLOUR = "#d9d9d9"
DONE_COLOUR = "#31a354"
# Collectives whose results are sums; the others only move values around.
SUMMING = ("all_reduce", "reduce", "reduce_scatter")


def _rank_colour(value: float) -> str:
    return RANK_COLOURS[int(value) // 10 % len(RANK_COLOURS)]


def _draw_row(ax, x0: float, y: float, values: list | None, summed: bool, *,
              faded: bool = False, colour: str | None = None, text: str | None = None) -> None:
    if values is None:
        ax.text(x0 + 0.5, y, "-", ha="center", va="center", color="grey")
        return
    for i, value in enumerate(values):
        face = colour or (SUM_COLOUR if summed else _rank_colour(value))
        ax.add_patch(Rectangle((x0 + i, y - 0.4), 1, 0.8, facecolor=face, edgecolor="black",
                               alpha=0.35 if faded else 1.0, hatch="//" if faded else None))
        # a scratch value's digits sit on a clear patch, so the hatching does not cross them
        ax.text(x0 + i + 0.5, y, text or f"{value:g}", ha="center", va="center", fontsize=7 if text else 8,
                color="dimgrey" if faded else "black",
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0) if faded else None)


def _rank_axis(ax, world_size: int, width: float) -> None:
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(world_size - 0.4, -0.6)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)


def plot_collective(results: list[dict], title: str | None = None) -> Figure:
    """Each rank's tensor before (left) and after (right) a collective, from the workers' results
    (dicts with "before", "after", "defined"); hatched cells are undefined scratch values."""
    world_size = len(results)
    summed = results[0]["name"] in SUMMING
    widths = [max(len(r[key] or [0]) for r in results) for key in ("before", "after")]
    fig = plt.figure(figsize=(2.0 + 0.45 * sum(widths), 0.6 + 0.45 * world_size), layout="constrained")
    axes = fig.subplots(1, 2, width_ratios=widths)
    for ax, key, width in zip(axes, ("before", "after"), widths):
        for r in results:
            _draw_row(ax, 0, r["rank"], r[key], summed and key == "after",
                      faded=key == "after" and not r["defined"])
        _rank_axis(ax, world_size, width)
        ax.set_title(key)
    axes[1].set_yticks(range(world_size), [""] * world_size)
    fig.suptitle(title or results[0]["name"])
    return fig


def plot_barrier(results: list[dict]) -> Figure:
    """When each rank arrived at the barrier and when it left (seconds after the first arrival). With
    ``barrier_timeline(..., broadcast=True)``'s results, a second panel: the broadcast from rank 0 that
    only the last rank reaches late, whose rank 0 may leave before that rank arrives."""
    broadcast = all("broadcast_left" in r for r in results)
    fig = plt.figure(figsize=(6, 0.8 + 0.4 * len(results) * (2 if broadcast else 1)), layout="constrained")
    panels = [("arrived", "left", "dist.barrier(): nobody leaves before the last rank arrives")]
    if broadcast:
        panels.append(("broadcast_arrived", "broadcast_left",
                       f"dist.broadcast(src=0), rank {len(results) - 1} late: rank 0 may leave before it arrives"))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (arrived_key, left_key, title) in zip(axes, panels):
        start = min(r[arrived_key] for r in results)
        for r in results:
            arrived, left = r[arrived_key] - start, r[left_key] - start
            ax.plot([arrived, left], [r["rank"]] * 2, color="grey", linewidth=3,
                    label="waiting" if r["rank"] == 0 else None)
            ax.plot(arrived, r["rank"], "o", color="tab:blue", label="arrives" if r["rank"] == 0 else None)
            ax.plot(left, r["rank"], "s", color="tab:green", label="leaves" if r["rank"] == 0 else None)
        ax.set_yticks(range(len(results)), [f"rank {r['rank']}" for r in results])
        ax.invert_yaxis()
        ax.set_xlabel("seconds after the first rank arrived")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig


def _ring_addends(results: list[dict], i: int, value: float) -> str | None:
    """A partial sum at position ``i`` written as the start values it adds ("1+11"): those of a run of
    neighbours on the ring, as the reduce-scatter adds them. None when no run sums to ``value``."""
    world_size = len(results)
    for length in range(2, world_size):
        for first in range(world_size):
            ranks = sorted((first + k) % world_size for k in range(length))
            starts = [results[r]["history"][0][i] for r in ranks]
            if sum(starts) == value:
                return "+".join(f"{start:g}" for start in starts)
    return None


def plot_ring_steps(results: list[dict]) -> Figure:
    """Every rank's tensor after each step of the ring all-reduce (from ``ring_steps``): partial
    sums grey, written as their addends ("1+11"), finished sums green. Inside each step's panel, an
    arrow per send, from the chunk a rank sent to the slot it lands in on its right neighbour: at
    step t, rank r sends chunk (r - t + 1) mod N. The last rank's send to rank 0 leaves below and enters from above."""
    world_size = len(results)
    steps = len(results[0]["history"])
    gap, row = 1.0, 1.7  # room between two panels; distance between two ranks' rows, for the arrows
    stride = world_size + gap
    # A cell still holds a starting value if it equals some rank's start at that position
    # (with lesson 01's numbers, a partial sum never does for N <= 4).
    starts = [{r["history"][0][i] for r in results} for i in range(world_size)]
    final = results[0]["history"][-1]
    fig = plt.figure(figsize=(1.2 + 0.62 * steps * stride, 1.6 + 0.62 * world_size * row), layout="constrained")
    ax = fig.subplots()
    arrow = dict(arrowstyle="->", color="black", lw=1.4)
    for step in range(steps):
        x0 = step * stride
        for r in results:
            for i, value in enumerate(r["history"][step]):
                original = value in starts[i]
                colour = None if original else DONE_COLOUR if value == final[i] else SUM_COLOUR
                text = _ring_addends(results, i, value) if colour == SUM_COLOUR else None
                _draw_row(ax, x0 + i, r["rank"] * row, [value], not original, colour=colour, text=text)
        phase = "start" if step == 0 else ("reduce-scatter" if step < world_size else "all-gather")
        label = phase if step == 0 else f"{phase}, step {step if step < world_size else step - world_size + 1}"
        ax.text(x0 + world_size / 2, -1.15, label, ha="center", va="bottom", fontsize=10)
        if not step:  # the chunks named once, above the start; the other panels have arrows there
            for i in range(world_size):
                ax.text(x0 + i + 0.5, -0.5, f"chunk {i}", ha="center", va="bottom", fontsize=8, color="dimgrey")
            continue
        for sender in range(world_size):  # the sends that led to this step's tensors
            receiver = (sender + 1) % world_size
            x = x0 + (sender - step + 1) % world_size + 0.5
            if receiver > sender:
                ax.annotate("", xy=(x, receiver * row - 0.42), xytext=(x, sender * row + 0.42), arrowprops=arrow)
            else:  # the wrap-around: out of the last rank's chunk, into rank 0's
                bottom = sender * row + 0.42
                ax.annotate("", xy=(x, bottom + 0.55), xytext=(x, bottom), arrowprops=arrow)
                ax.text(x, bottom + 0.6, f"to rank {receiver}", ha="center", va="top", fontsize=7)
                ax.annotate("", xy=(x, receiver * row - 0.42), xytext=(x, receiver * row - 0.95), arrowprops=arrow)
                ax.text(x + 0.08, receiver * row - 0.72, f"from rank {sender}", ha="left", va="center",
                        fontsize=7)
    ax.set_xlim(-0.2, (steps - 1) * stride + world_size + 0.4)
    ax.set_ylim((world_size - 1) * row + 1.2, -1.3)
    ax.set_yticks([r * row for r in range(world_size)], [f"rank {r}" for r in range(world_size)])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title("ring all-reduce: in each step, each rank sends one chunk to its right neighbour; "
                 "each arrow goes from the chunk sent to the slot it lands in", fontsize=11)
    return fig


def binomial_broadcast_sends(world_size: int, src: int = 0) -> list[tuple[int, int, int]]:
    """(round, sender, receiver) for each send of a binomial-tree broadcast from ``src``, the
    order gloo's broadcast uses: in round i, every rank that already has the data sends it to
    the rank 2**i further on (counted from ``src``)."""
    sends = []
    step = 1
    round_number = 1
    while step < world_size:
        for offset in range(step):
            if offset + step < world_size:
                sends.append((round_number, (src + offset) % world_size, (src + offset + step) % world_size))
        step *= 2
        round_number += 1
    return sends


def plot_broadcast_tree(world_size: int = 4, src: int = 0, late: int | None = None) -> Figure:
    """The tree a broadcast travels along: an arrow per send, labelled with its round. A rank
    returns once its own sends are received, so a sender to the ``late`` rank waits for it."""
    sends = binomial_broadcast_sends(world_size, src)
    fig, ax = plt.subplots(figsize=(6, 2.6))
    ax.axis("off")
    ax.set_xlim(-0.6, world_size - 0.4)
    ax.set_ylim(-0.9, 1.0)
    for r in range(world_size):
        edge = "tab:red" if r == late else "black"
        ax.text(r, 0, f"rank {r}" + ("\n(late)" if r == late else ""), ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle="round,pad=0.4", facecolor=_rank_colour(10 * r + 1), edgecolor=edge))
    for round_number, sender, receiver in sends:
        colour = "tab:red" if receiver == late else "tab:blue"
        bend = f"arc3,rad=-{0.25 + 0.1 * round_number}"
        ax.annotate("", xy=(receiver, 0.22), xytext=(sender, 0.22),
                    arrowprops=dict(arrowstyle="->", color=colour, connectionstyle=bend))
        ax.text((sender + receiver) / 2, 0.4 + 0.22 * abs(receiver - sender), f"round {round_number}",
                ha="center", fontsize=8, color=colour)
    if late is not None:
        waiting = sorted({s for _, s, r in sends if r == late})
        ax.text((world_size - 1) / 2, -0.7, f"rank {', '.join(map(str, waiting))} sends to rank {late}: "
                "it cannot finish before the late rank takes the data", ha="center", fontsize=9)
    ax.set_title(f"broadcast from rank {src} on {world_size} ranks: who sends to whom", fontsize=10)
    fig.tight_layout()
    return fig


def plot_send_deadlock() -> Figure:
    """Two ranks that both call a blocking send first: each waits for a recv the other never
    reaches, until the group's timeout ends the wait."""
    fig, ax = plt.subplots(figsize=(8, 2.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.7, 1.7)
    ax.set_yticks([1, 0], ["rank 0", "rank 1"])
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("time →")
    for y, peer in ((1, 1), (0, 0)):
        ax.add_patch(Rectangle((0.3, y - 0.2), 7.2, 0.4, facecolor="#f4c7c3", edgecolor="tab:red"))
        ax.text(3.9, y, f"send(dst={peer}): waiting for rank {peer} to call recv", ha="center", va="center", fontsize=9)
        ax.add_patch(Rectangle((7.7, y - 0.2), 2.1, 0.4, facecolor="white", edgecolor="grey", linestyle="--"))
        ax.text(8.75, y, f"recv(src={peer})\nnever reached", ha="center", va="center", fontsize=8, color="grey")
    ax.axvline(7.5, color="black", linestyle=":")
    ax.text(7.5, 1.45, "the group's timeout: an error", ha="center", fontsize=8.5)
    ax.annotate("", xy=(1.2, 0.22), xytext=(1.2, 0.78), arrowprops=dict(arrowstyle="<->", color="tab:red"))
    ax.text(1.35, 0.5, "each waits for the other", fontsize=8, color="tab:red", va="center")
    fig.tight_layout()
    return fig


def plot_barrier_plan(world_size: int = 4, step: float = 0.1) -> Figure:
    """What a barrier should do when rank r arrives step x r late: every rank waits inside the barrier
    until the last one arrives, then all leave together. Drawn from the rule, before any measurement."""
    last = step * (world_size - 1)
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.5 * world_size))
    for rank in range(world_size):
        arrival = step * rank
        ax.barh(rank, arrival, color=RANK_COLOURS[rank], edgecolor="black",
                label="not arrived yet" if rank == 0 else None)
        ax.barh(rank, last - arrival, left=arrival, color="white", edgecolor="black", hatch="//",
                label="waiting inside barrier()" if rank == 0 else None)
    ax.axvline(last, color="black", linestyle="--")
    ax.text(last, -0.55, " the last rank arrives:\n every rank leaves", va="top", fontsize=8.5)
    ax.set_xlim(0, last * 1.6)
    ax.set_ylim(world_size - 0.4, -0.7)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_xlabel("seconds after the first rank arrives")
    ax.set_title("A barrier, as planned: nobody leaves before the last rank arrives", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
