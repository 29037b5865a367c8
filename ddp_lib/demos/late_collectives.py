"""Lesson 01: who waits when one rank comes late to each collective, and what happens when two
ranks call collectives in different orders.

Rank r's tensors follow lesson 01's convention: [10 r + 1, ..., 10 r + N] with N = world_size.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group
from ddp_lib.workers.point_to_point import gloo_message
from ddp_lib.workers.shared import start_tensor

COLLECTIVES = ("barrier", "broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
               "reduce_scatter", "all_to_all")


def call(name: str, rank: int, world_size: int) -> None:
    """Run one collective ``name`` with rank 0 as its root where it has one."""
    mine = start_tensor(rank, world_size, "cpu")
    parts = [torch.zeros(world_size) for _ in range(world_size)]
    if name == "barrier":
        dist.barrier()
    elif name == "broadcast":
        dist.broadcast(mine, src=0)
    elif name == "all_reduce":
        dist.all_reduce(mine)
    elif name == "reduce":
        dist.reduce(mine, dst=0)
    elif name == "all_gather":
        dist.all_gather(parts, mine)
    elif name == "gather":
        dist.gather(mine, parts if rank == 0 else None, dst=0)
    elif name == "scatter":
        dist.scatter(mine, list(mine.repeat(world_size, 1)) if rank == 0 else None, src=0)
    elif name == "reduce_scatter":
        dist.reduce_scatter(mine[:1].clone(), list(mine.split(1)))
    elif name == "all_to_all":
        dist.all_to_all(list(torch.empty(world_size).split(1)), list(mine.split(1)))
    else:
        raise ValueError(f"name={name!r}: expected one of {', '.join(COLLECTIVES)}")


def late_in_each(rank: int, world_size: int, delay: float = 0.4) -> dict:
    """For each collective in turn, the last rank arrives ``delay`` s late; return how long this
    rank spent inside each call."""
    with process_group(rank, world_size):
        waited = {}
        for name in COLLECTIVES:
            dist.barrier()  # line everyone up, so the delay below is the only difference
            if rank == world_size - 1:
                time.sleep(delay)
            start = time.perf_counter()
            call(name, rank, world_size)
            waited[name] = time.perf_counter() - start
        return {"rank": rank, "waited": waited}


def wrong_order(rank: int, world_size: int, timeout_s: float = 2.0) -> dict:
    """Rank 0 calls all_reduce then broadcast; every other rank calls broadcast then all_reduce.
    Return what each call left in the tensor, or gloo's error, and the seconds it took."""
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        order = ["all_reduce", "broadcast"] if rank == 0 else ["broadcast", "all_reduce"]
        calls = []
        start = time.perf_counter()
        for name in order:
            mine = torch.full((2,), float(rank + 1))
            try:
                dist.broadcast(mine, src=0) if name == "broadcast" else dist.all_reduce(mine)
                calls.append((name, mine.tolist()))
            except RuntimeError as exc:
                calls.append((name, gloo_message(str(exc))))
                break
        return {"rank": rank, "calls": calls, "seconds": time.perf_counter() - start}
