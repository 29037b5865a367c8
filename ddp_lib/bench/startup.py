"""Start-up cost: init, one 4 KiB all-reduce and teardown on 2 and 4 ranks, started by
torch.multiprocessing.start_processes with spawn, forkserver and fork, and by ddp_lib's launcher,
the four taken in turn in one run. Python runs one forkserver per process, and ddp_lib has it
preload torch: the "mp forkserver" row shares that server, so its ranks do not import torch either.

    python -m ddp_lib bench startup [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 draws its verdict from it):

    python -m ddp_lib bench startup --json > ddp_lib/bench/results/startup.json
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
from pathlib import Path

from ddp_lib.bench.launch_cost import plain_launch
from ddp_lib.bench.ranks import allreduce_once
from ddp_lib.bench.report import machine, run_main
from ddp_lib.bench.stats import median, time_in_turn
from ddp_lib.launch import run_ranks

FULL_RUN = Path(__file__).with_name("results") / "startup.json"
COLUMNS = [("world_size", "ranks", "d"), ("method", "started by", "s"), ("seconds", "median (s)", ".3f"),
           ("ratio", "vs ddp_lib", ".1f")]


def methods() -> dict:
    """The launchers to compare, by name: each a function of world_size that runs one job."""
    available = multiprocessing.get_all_start_methods()
    # ddp_lib first: whoever starts the process's one forkserver decides what it preloads.
    found = {"ddp_lib": functools.partial(run_ranks, allreduce_once, show_output=False)}
    found.update({f"mp {m}": functools.partial(plain_launch, start_method=m)
                  for m in ("spawn", "forkserver", "fork") if m in available})
    return found


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None,
            names: tuple[str, ...] | None = None) -> dict:
    """{"rows": one per (world size, launcher): median seconds and the ratio to ddp_lib's}, the
    repeats, and the machine's cores and load average while it ran.
    names: a subset of methods() to run (ddp_lib is always run, as the baseline)."""
    repeats = repeats or (1 if quick else 5)
    world_sizes = world_sizes or ((2,) if quick else (2, 4))
    launchers = {k: v for k, v in methods().items() if names is None or k in names or k == "ddp_lib"}
    rows, load_before = [], os.getloadavg()[0]
    for world_size in world_sizes:
        # The warm-up round starts forkserver's server and fills caches; a spawn has nothing to warm.
        times = time_in_turn({name: functools.partial(run, world_size) for name, run in launchers.items()},
                             repeats, cold=("mp spawn",))
        ours = median(times["ddp_lib"])
        rows += [{"world_size": world_size, "method": name, "seconds": round(median(t), 4),
                  "ratio": round(median(t) / ours, 2)} for name, t in times.items()]
    return {"rows": rows, "repeats": repeats, **machine(),
            "load_average": round(max(load_before, os.getloadavg()[0]), 1)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def _notes(result: dict) -> str:
    return (f"median of {result['repeats']} launches each after a warm-up round. Python has one forkserver per "
            "process: 'mp forkserver' shares the server ddp_lib started, with torch already preloaded")


def main(argv: list[str]) -> int:
    return run_main(argv, "startup", __doc__, measure, COLUMNS, _notes)
