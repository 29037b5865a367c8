"""Lesson 07: where rank 1 waits when rank 0's stray metric all-reduce meets DDP's loop.

Rank 1 runs :func:`ddp_lib.workers.failure_lab.metric_on_rank0_in_ddp_loop` with ``faulthandler``
dumping its Python stack to its stderr every ``every_s`` seconds, until the worker raises.
The last dump is where rank 1 waited when the group's timeout ended the wait.
When the worker raises, each rank writes its last flight-recorder entries to its stderr.
"""

from __future__ import annotations

import faulthandler
import pickle
import re
import sys

import torch

from ddp_lib.process_group import process_group
from ddp_lib.workers.failure_lab import SHORT, metric_on_rank0_in_ddp_loop

DUMP_HEADER = "Timeout ("  # faulthandler's first line of each timed dump
RECORDER_MARK = "flight recorder: "  # the first words of each line print_last_collectives writes
# DDP's forward calls this method first; on the first step after step 0 it runs the bucket rebuild's broadcasts.
DDP_PRE_FORWARD = "_pre_forward (distributed.py)"


def print_last_collectives(last: int = 2) -> None:
    """Write this rank's ``last`` flight-recorder entries to its stderr, one line each:
    the collective's sequence number, its name and its input sizes. torch 2.13 records every
    collective of a gloo group too; ``_dump_fr_trace`` (private) returns the record, pickled."""
    entries = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["entries"]
    for entry in entries[-last:]:
        print(f"{RECORDER_MARK}seq {entry['collective_seq_id']} {entry['profiling_name']} "
              f"sizes {entry['input_sizes']}", file=sys.stderr, flush=True)


def recorded_collectives(stderr: str) -> list[str]:
    """The lines :func:`print_last_collectives` wrote to ``stderr``, without their mark."""
    return [line.split(RECORDER_MARK, 1)[1] for line in stderr.splitlines() if line.startswith(RECORDER_MARK)]


def metric_collision_with_rank1_stacks(rank: int, world_size: int, every_s: float = 0.25) -> list[float]:
    """The DDP loop of ``metric_on_rank0_in_ddp_loop``; rank 1 dumps its stack every ``every_s`` s while it runs."""
    if rank == 1:
        faulthandler.dump_traceback_later(every_s, repeat=True, file=sys.stderr)
    try:  # the group is made here, so that it still exists when the worker raises
        with process_group(rank, world_size, timeout=SHORT):
            try:
                return metric_on_rank0_in_ddp_loop(rank, world_size)
            except Exception:
                print_last_collectives(5)  # all five: the group runs five collectives
                raise
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


def where_waited(frames: list[str]) -> str:
    """In plain words, where the innermost of ``frames`` (from :func:`last_dump_frames`) waited:
    "DDP's forward, before the model ran" for DDP's ``_pre_forward``, else the frame as it is."""
    if not frames:
        return "no stack dump found"
    if frames[0] == DDP_PRE_FORWARD:
        return "DDP's forward, before the model ran"
    return frames[0]
