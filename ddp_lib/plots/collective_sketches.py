"""Lesson 01's sketches drawn from the rules, before a measurement: an async_op collective's
timeline, and 4 ranks split into two subgroups."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ddp_lib.plots.collectives import RANK_COLOURS


def plot_async_timeline() -> Figure:
    """all_reduce(..., async_op=True): the call returns a Work at once; the transfer runs on the
    backend's own thread while the rank's code goes on; wait() returns once the transfer is done."""
    fig, ax = plt.subplots(figsize=(8, 2.4))
    rows = ((1, "your code", ((0.2, 0.8, "call", "#d9d9d9"), (1.0, 5.0, "your next lines run", RANK_COLOURS[0]),
                              (6.2, 0.9, "wait()", "white"))),
            (0, "gloo's thread", ((1.0, 6.1, "the transfer: bytes move", RANK_COLOURS[1]),)))
    for y, _, boxes in rows:
        for left, length, text, colour in boxes:
            ax.add_patch(Rectangle((left, y - 0.25), length, 0.5, facecolor=colour, edgecolor="black"))
            ax.text(left + length / 2, y, text, ha="center", va="center", fontsize=9)
    ax.annotate("returns a Work:\nnot done yet", xy=(1.0, 1.25), xytext=(1.0, 1.75), ha="center", fontsize=8.5,
                arrowprops=dict(arrowstyle="->"))
    ax.annotate("done: wait() returns", xy=(7.1, 0.25), xytext=(8.0, 0.75), fontsize=8.5,
                arrowprops=dict(arrowstyle="->"))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.5, 2.2)
    ax.set_yticks([1, 0], [label for _, label, _ in rows])
    ax.set_xticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("time →")
    ax.set_title("async_op=True: the call returns at once; the data moves in the background", fontsize=10)
    fig.tight_layout()
    return fig


def plot_subgroups(world_size: int = 4) -> Figure:
    """new_group([0, 2]) and new_group([1, 3]): an all_reduce with group= sums within one group only;
    each member has a rank inside its group too."""
    fig, ax = plt.subplots(figsize=(8, 2.6))
    for g, (name, members) in enumerate((("evens", range(0, world_size, 2)), ("odds", range(1, world_size, 2)))):
        left = 0.2 + 4.2 * g
        ax.add_patch(Rectangle((left, 0.2), 3.8, 1.9, facecolor="none", edgecolor="grey", linestyle="--"))
        ax.text(left + 1.9, 1.85, f"{name}: new_group({list(members)})", ha="center", fontsize=9)
        for i, rank in enumerate(members):
            x = left + 0.3 + 1.8 * i
            ax.add_patch(Rectangle((x, 0.6), 1.4, 0.9, facecolor=RANK_COLOURS[rank], edgecolor="black"))
            ax.text(x + 0.7, 1.05, f"rank {rank}\nin group: {i}", ha="center", va="center", fontsize=9)
        ax.text(left + 1.9, 0.35, f"all_reduce(group=...) sums {' + '.join(map(str, members))}", ha="center",
                fontsize=8.5)
    ax.set_xlim(0, 8.6)
    ax.set_ylim(0, 2.3)
    ax.axis("off")
    ax.set_title(f"{world_size} ranks, two subgroups: a collective with group= stays inside one", fontsize=10)
    fig.tight_layout()
    return fig


# What each rank does when the ranks disagree, as lesson 01's section "When ranks disagree" shows
# it: (case, ((rank, outcome, label), ...)). Outcomes: "timeout" (waits until the group's timeout,
# then raises), "error" (raises at once), "late error" (waits, raises when its peer leaves),
# "wrong" (returns at once with a wrong result), "killed" (its process is killed inside the call),
# "stopped" (its process ends inside the call), "goes on" (does not call it), "exits", "absent".
WHEN_RANKS_DISAGREE = (
    ("only rank 0 calls all_reduce (2 of the 4 ranks shown)", ((0, "timeout", "waits, then times out"),
                                                                (1, "goes on", "never calls it: goes on"))),
    ("the shapes differ (3 and 4 elements)", ((0, "wrong", "in this run: a wrong sum, no error"),
                                               (1, "late error", "errors when rank 0 leaves"))),
    ("the shapes differ (1000 and 1001 elements)", ((0, "killed", "killed by SIGABRT: gloo names the size"),
                                                    (1, "stopped", "killed too, or stopped by the launcher"))),
    ("the calls come in different orders (a folded section)", ((0, "timeout", "waits, then times out"),
                                                               (1, "timeout", "waits, then times out"))),
)


WAITS_COLOUR, BRIEF_COLOUR = "#fdd0a2", "#d9d9d9"  # when ranks disagree: a rank that waits, one that leaves soon


def plot_when_ranks_disagree(cases=WHEN_RANKS_DISAGREE, timeout: float = 8.0) -> Figure:
    """One row per rank in each case: how long it stays in the call, and how the call ends."""
    ends = {"timeout": timeout, "error": 0.6, "late error": 2.2, "wrong": 0.6, "killed": 0.6, "stopped": 0.8,
            "goes on": 0.0, "exits": 0.0, "absent": 0.0}
    marks = {"timeout": ("✗", "#d62728"), "error": ("✗", "#d62728"), "late error": ("✗", "#d62728"),
             "wrong": ("!", "#d62728"), "killed": ("✗", "#d62728"),
             "stopped": ("■", "black"), "goes on": ("→", "black"), "exits": ("■", "black"), "absent": ("", "black")}
    rows = sum(len(ranks) for _, ranks in cases) + len(cases)
    fig, ax = plt.subplots(figsize=(9, 0.36 * rows + 1.0))
    y, ticks, labels = rows - 1, [], []
    for case, ranks in cases:
        ax.text(-0.1, y, case, ha="left", va="center", fontsize=9.5, weight="bold")  # a heading row
        y -= 1
        for rank, outcome, label in ranks:
            end = ends[outcome]
            if end:
                colour = WAITS_COLOUR if end > 1 else BRIEF_COLOUR
                ax.add_patch(Rectangle((0, y - 0.3), end, 0.6, facecolor=colour, edgecolor="black"))
            mark, mark_colour = marks[outcome]
            ax.text(end + 0.15, y, mark, ha="left", va="center", fontsize=12, color=mark_colour, weight="bold")
            ax.text(end + 0.6, y, label, ha="left", va="center", fontsize=9,
                    color="#d62728" if outcome == "wrong" else "black")
            ticks.append(y)
            labels.append(f"rank {rank}")
            y -= 1
    ax.axvline(timeout, color="grey", linestyle="--", linewidth=1)
    ax.text(timeout, rows - 0.4, "the group's timeout", ha="center", va="bottom", fontsize=8.5, color="grey")
    ax.set_xlim(-0.2, timeout + 6.5)
    ax.set_ylim(-0.7, rows + 0.3)
    ax.set_yticks(ticks, labels, fontsize=8.5)
    ax.set_xticks([0], ["the call"])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.legend(handles=[Patch(facecolor=WAITS_COLOUR, edgecolor="black", label="inside the call, waiting"),
                       Patch(facecolor=BRIEF_COLOUR, edgecolor="black", label="inside the call, briefly")],
              loc="lower right", fontsize=8.5, frameon=False)
    ax.set_xlabel("time →  (bar: the rank is inside the call;  ✗ error or killed;  ! wrong result;  ■ process ends)")
    ax.set_title("When ranks disagree: who waits, who errors, who goes on with a wrong result", fontsize=10)
    fig.tight_layout()
    return fig
