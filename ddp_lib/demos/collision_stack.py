"""Lesson 07: where rank 1 waits when rank 0's stray metric all-reduce meets DDP's loop.

Rank 1 runs :func:`ddp_lib.workers.failure_lab.metric_on_rank0_in_ddp_loop` with ``faulthandler``
dumping its Python stack to its stderr every ``every_s`` seconds, until the worker raises.
The last dump is where rank 1 waited when the group's timeout ended the wait.
"""

from __future__ import annotations

import faulthandler
import re
import sys

from ddp_lib.workers.failure_lab import metric_on_rank0_in_ddp_loop

DUMP_HEADER = "Timeout ("  # faulthandler's first line of each timed dump


def metric_collision_with_rank1_stacks(rank: int, world_size: int, every_s: float = 0.25) -> list[float]:
    """The DDP loop of ``metric_on_rank0_in_ddp_loop``; rank 1 dumps its stack every ``every_s`` s while it runs."""
    if rank == 1:
        faulthandler.dump_traceback_later(every_s, repeat=True, file=sys.stderr)
    try:
        return metric_on_rank0_in_ddp_loop(rank, world_size)
    finally:
        faulthandler.cancel_dump_traceback_later()


def last_dump_frames(stderr: str, frames: int = 3) -> list[str]:
    """The innermost ``frames`` frames of the worker's thread in the last timed dump in ``stderr``,
    as "function (file)". A dump holds every thread; the worker's is the one that runs the loop."""
    dumps = stderr.split(DUMP_HEADER)
    threads = [t for t in dumps[-1].split("\n\n") if "metric_on_rank0_in_ddp_loop" in t] if len(dumps) > 1 else []
    if not threads:
        return []
    found = re.findall(r'File "(?:[^"]*/)?([^"/]+)", line \d+ in (\S+)', threads[0])
    return [f"{function} ({file})" for file, function in found[:frames]]
