"""Lesson 01's ring all-reduce (send/recv) against dist.all_reduce, timed alternately in one
run, for 2 and 4 ranks: the ratio ring / all_reduce per message size.

    python -m ddp_lib bench ring [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 draws its verdict from it):

    python -m ddp_lib bench ring --json > ddp_lib/bench/results/ring.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddp_lib.bench.allreduce import SIZES  # the same sizes as the all-reduce sweep
from ddp_lib.bench.ranks import allreduce_sweep
from ddp_lib.bench.report import human_bytes, machine, run_main
from ddp_lib.launch import run_ranks

QUICK_SIZES = [4**k for k in (2, 5, 8, 12)]  # 16 B to 16 MiB
GOAL_BYTES, GOAL_RATIO = 16 << 20, 1.2  # the goal: within 1.2x of gloo at 16 MiB, on 2 and on 4 ranks
FULL_RUN = Path(__file__).with_name("results") / "ring.json"
COLUMNS = [("world_size", "ranks", "d"), ("size", "size", "s"), ("ring_us", "ring (us)", ".1f"),
           ("all_reduce_us", "all_reduce (us)", ".1f"), ("ratio", "ring / all_reduce", ".2f")]


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None,
            sizes: list[int] | None = None) -> dict:
    """{"rows": one per (world size, size) with both medians and their ratio}, the repeats, and the
    machine's cores and load average while it ran."""
    repeats = repeats or 5
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    world_sizes = world_sizes or ((2,) if quick else (2, 4))
    rows, load_before = [], os.getloadavg()[0]
    for world_size in world_sizes:
        for r in run_ranks(allreduce_sweep, world_size, args=(sizes, repeats, True), show_output=False)[0]:
            rows.append({"world_size": world_size, "bytes": r["bytes"], "size": human_bytes(r["bytes"]),
                         "ring_us": round(r["ring_s"] * 1e6, 1), "all_reduce_us": round(r["all_reduce_s"] * 1e6, 1),
                         "ratio": round(r["ring_s"] / r["all_reduce_s"], 3)})
    return {"rows": rows, "repeats": repeats, **machine(),
            "load_average": round(max(load_before, os.getloadavg()[0]), 1)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def _notes(result: dict) -> str:
    lines = []
    for world_size in (2, 4):
        goal = [r for r in result["rows"] if r["world_size"] == world_size and r["bytes"] == GOAL_BYTES]
        if not goal:
            lines.append(f"goal (16 MiB, {world_size} ranks) not in this run")
            continue
        verdict = "met" if goal[0]["ratio"] <= GOAL_RATIO else "missed"
        lines.append(f"goal ring within {GOAL_RATIO}x of all_reduce at 16 MiB on {world_size} ranks: "
                     f"{goal[0]['ratio']:.2f}x ({verdict})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_main(argv, "ring", __doc__, measure, COLUMNS, _notes)
