"""Lesson 01's workers for what comes after the eight collectives: who waits for a late rank,
collectives on Python objects, the single-tensor variants of all_gather and reduce_scatter, and
``async_op=True``.

Rank r's tensors follow lesson 01's convention: [10 r + 1, ..., 10 r + N] with N = world_size.
"""

from __future__ import annotations

import time
from typing import Literal, get_args

import torch
import torch.distributed as dist

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.shared import start_tensor
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group
    from shared import start_tensor

Timed = Literal["barrier", "all_reduce", "broadcast"]
TIMED = get_args(Timed)


def late_arrival(rank: int | None = None, world_size: int | None = None, delay: float = 2.0) -> dict:
    """The last rank arrives ``delay`` seconds late at a barrier, an all_reduce and a broadcast
    from rank 0, in turn; return how long this rank spent inside each call."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        waited = {}
        for name in TIMED:
            mine = start_tensor(rank, world_size, device)
            dist.barrier()  # line everyone up, so the delay below is the only difference
            if rank == world_size - 1:
                time.sleep(delay)
            start = time.perf_counter()
            if name == "barrier":
                dist.barrier()
            elif name == "all_reduce":
                dist.all_reduce(mine)
            else:
                dist.broadcast(mine, src=0)
            waited[name] = time.perf_counter() - start
        return {"rank": rank, "waited": waited}


def objects_and_single_tensors(rank: int | None = None, world_size: int | None = None) -> dict:
    """all_gather_object and broadcast_object_list (any picklable object), then all_gather_single
    and reduce_scatter_single (one flat tensor instead of a list; torch 2.13's names for
    all_gather_into_tensor and reduce_scatter_tensor, which still work with a FutureWarning)."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        # Objects: pickled, sent as bytes, unpickled. Handy for small metadata, slow for data.
        everyone = [None] * world_size
        dist.all_gather_object(everyone, {"rank": rank, "batches": 10 + rank})
        config = [{"lr": 0.1, "epochs": 3}] if rank == 0 else [None]
        dist.broadcast_object_list(config, src=0)  # in place: rank 0's list overwrites the others'

        mine = start_tensor(rank, world_size, device)
        gathered = torch.empty(world_size * world_size, device=device)
        dist.all_gather_single(gathered, mine)  # like all_gather, into one flat tensor
        piece = torch.empty(1, device=device)
        dist.reduce_scatter_single(piece, mine)  # like reduce_scatter, from one flat tensor
        return {"rank": rank, "everyone": everyone, "config": config[0],
                "all_gather_single": gathered.tolist(), "reduce_scatter_single": piece.tolist()}


def async_all_reduce(rank: int | None = None, world_size: int | None = None, numel: int = 1_000_000,
                     patience: float = 10.0) -> dict:
    """all_reduce with async_op=True on ``numel`` floats: the call returns a Work at once. The
    rank asks the Work whether the transfer is done right after the call; then, never calling
    wait(), it sleeps a millisecond at a time until the Work says done (``patience`` seconds at most). Then a
    second all_reduce is asked whether it is done, then waited on at once."""
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        total = torch.full((numel,), float(rank), device=device)
        dist.barrier()  # start together, so that neither rank waits for the other below
        work = dist.all_reduce(total, async_op=True)  # returns a Work; the transfer runs in the background
        done_at_return = work.is_completed()  # usually False: 4 MB takes longer to move than this call
        deadline = time.perf_counter() + patience
        while not work.is_completed() and time.perf_counter() < deadline:
            time.sleep(0.001)  # other work: neither wait() nor the tensor is touched
        done_without_wait = work.is_completed()  # finished meanwhile, on gloo's own thread
        work.wait()  # only now may the rank read or write `total`
        again = dist.all_reduce(torch.ones(numel, device=device), async_op=True)  # a second one, waited on at once
        again_done_before_wait = again.is_completed()  # usually False, as done_at_return
        again.wait()  # not done yet, so this thread blocks here until it is
        return {"rank": rank, "work": type(work).__name__, "done_at_return": done_at_return,
                "done_without_wait": done_without_wait, "sum": total[0].item(), "completed": work.is_completed(),
                "again_done_before_wait": again_done_before_wait, "again_done_after_wait": again.is_completed()}
