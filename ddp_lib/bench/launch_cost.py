"""Launch cost: init, one 4 KiB all-reduce and teardown on 2 and 4 ranks, started by
``ddp_lib.launch.run_ranks`` (showing rank 0's output live, as by default, and showing nothing) and
by a plain ``torch.multiprocessing.spawn``, taken in turn in one run.

    python -m ddp_lib bench launch [--quick] [--repeats N] [--json]
"""

from __future__ import annotations

import functools

import torch.multiprocessing as mp

from ddp_lib.bench.ranks import allreduce_once, plain_allreduce
from ddp_lib.bench.report import machine, run_main
from ddp_lib.bench.stats import median, time_in_turn
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import free_port

GOAL = 0.05  # a 2-rank launch through ddp_lib at most 5% of mp.spawn's
COLUMNS = [("world_size", "ranks", "d"), ("mp_spawn_s", "mp.spawn (s)", ".3f"), ("ddp_lib_s", "ddp_lib (s)", ".3f"),
           ("ratio", "ddp_lib / mp.spawn", ".1%"), ("quiet_s", "ddp_lib, no output shown (s)", ".3f")]


def plain_launch(world_size: int, start_method: str = "spawn") -> None:
    """What the classic example does: torch.multiprocessing starts the ranks (``mp.spawn`` is
    start method "spawn"), rank 0 hosts the store on a port chosen here."""
    mp.start_processes(plain_allreduce, args=(world_size, free_port()), nprocs=world_size, join=True,
                       start_method=start_method)


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None) -> dict:
    """{"rows": one per world size: the median seconds of each launcher, ddp_lib's as a fraction
    of mp.spawn's}."""
    repeats = repeats or (3 if quick else 5)
    world_sizes = world_sizes or ((2,) if quick else (2, 4))
    rows = []
    for world_size in world_sizes:
        times = time_in_turn({
            "ddp_lib": functools.partial(run_ranks, allreduce_once, world_size),  # as by default: rank 0's output live
            "quiet": functools.partial(run_ranks, allreduce_once, world_size, show_output=False),
            "mp.spawn": functools.partial(plain_launch, world_size),
        }, repeats, cold=("mp.spawn",))  # nothing to warm: every spawn starts from scratch
        ours, quiet, plain = median(times["ddp_lib"]), median(times["quiet"]), median(times["mp.spawn"])
        rows.append({"world_size": world_size, "mp_spawn_s": round(plain, 4), "ddp_lib_s": round(ours, 4),
                     "ratio": round(ours / plain, 4), "quiet_s": round(quiet, 4)})
    return {"rows": rows, "repeats": repeats, **machine()}


def _notes(result: dict) -> str:
    lines = [f"launch + init + 4 KiB all_reduce + teardown, median of {result['repeats']} after 1 warm-up"]
    goal = [r for r in result["rows"] if r["world_size"] == 2]
    if goal:
        verdict = "met" if goal[0]["ratio"] <= GOAL else "missed"
        lines.append(f"goal: a 2-rank launch through ddp_lib at most {GOAL:.0%} of mp.spawn's: "
                     f"{goal[0]['ratio']:.1%} ({verdict})")
    for r in result["rows"]:
        lines.append(f"world size {r['world_size']}: showing rank 0's output live costs "
                     f"{(r['ddp_lib_s'] - r['quiet_s']) * 1e3:+.1f} ms per launch (difference of medians)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_main(argv, "launch", __doc__, measure, COLUMNS, _notes)
