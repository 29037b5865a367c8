"""A control for lesson 08's oversubscription: 2 ranks all-reduce small messages, free to run on
any core, then with both pinned to one core, the two placements taken in turn in one run. If a
message costs more when the two ranks share a core, waiting for a core is what made 4 ranks on
2 cores slow.

    python -m ddp_lib bench pinned [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 draws its verdict from it):

    python -m ddp_lib bench pinned --json > ddp_lib/bench/results/pinned.json
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_lib.bench.gloo_ring import ring_sends
from ddp_lib.bench.ranks import _slowest
from ddp_lib.bench.report import human_bytes, machine, run_main
from ddp_lib.bench.stats import median, quartiles
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import process_group

FULL_RUN = Path(__file__).with_name("results") / "pinned.json"
SIZES = [4, 64, 1024, 4096]
QUICK_SIZES = [64, 4096]
ITERATIONS = 20  # all-reduces per timing: one takes only a few hundred microseconds
PLACEMENTS = ("any core", "one core")
COLUMNS = [("size", "size", "s"), ("placement", "placement", "s"), ("time_us", "time (us)", ".1f"),
           ("middle_half", "middle half (us)", "s"), ("messages", "messages/rank", "d"),
           ("per_message_us", "per message (us)", ".1f")]


def pin(cores: set[int]) -> None:
    """Pin every thread of this process to ``cores``. os.sched_setaffinity(0, ...) pins only the
    calling thread, and gloo's all-reduces run on the process group's own worker threads."""
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), cores)


def messages_per_rank(nbytes: int, world_size: int) -> int:
    """How many messages the busiest rank sends in gloo's ring for a message of nbytes."""
    sends = ring_sends(nbytes, world_size)
    return max(sum(s["rank"] == r for s in sends) for r in range(world_size))


def pinned_sweep(rank: int, world_size: int, sizes: list[int], repeats: int) -> dict[str, list[list[float]]]:
    """Per placement, per size, the slowest rank's seconds of one all-reduce in each repeat.
    "any core" lets the scheduler put each thread on any core, "one core" pins every rank to core 0."""
    with process_group(rank, world_size):
        everywhere = os.sched_getaffinity(0)
        cores = {"any core": everywhere, "one core": {0}}
        seconds: dict[str, list[list[float]]] = {p: [] for p in PLACEMENTS}
        for nbytes in sizes:
            tensor = torch.ones(max(1, nbytes // 4))
            times: dict[str, list[float]] = {p: [] for p in PLACEMENTS}
            for repeat in range(repeats + 1):  # the first round is warm-up
                for placement in PLACEMENTS:
                    pin(cores[placement])
                    dist.barrier()
                    start = time.perf_counter()
                    for _ in range(ITERATIONS):
                        dist.all_reduce(tensor)
                    if repeat:
                        times[placement].append((time.perf_counter() - start) / ITERATIONS)
            pin(everywhere)
            for placement in PLACEMENTS:
                seconds[placement].append(_slowest(times[placement]))
        return seconds


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": per size and placement, the median time of one all-reduce, its middle half and
    the time per message the busiest rank sends}, 2 ranks, one thread each."""
    sizes = QUICK_SIZES if quick else SIZES
    repeats = repeats or (5 if quick else 21)
    seconds = run_ranks(pinned_sweep, 2, args=(sizes, repeats), show_output=False, env={"OMP_NUM_THREADS": "1"})[0]
    rows = []
    for i, nbytes in enumerate(sizes):
        for placement in PLACEMENTS:
            us = [s * 1e6 for s in seconds[placement][i]]
            low, high = quartiles(us)
            messages = messages_per_rank(nbytes, 2)
            rows.append({"bytes": nbytes, "size": human_bytes(nbytes), "placement": placement,
                         "time_us": round(median(us), 1), "middle_half": f"{low:.0f}-{high:.0f}",
                         "quartiles_us": [round(low, 1), round(high, 1)], "messages": messages,
                         "per_message_us": round(median(us) / messages, 1)})
    return {"rows": rows, "repeats": repeats, **machine(),
            "load_average": round(os.getloadavg()[0], 1)}


def full_run() -> dict:
    """The run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def main(argv: list[str]) -> int:
    return run_main(argv, "pinned", __doc__, measure, COLUMNS)
