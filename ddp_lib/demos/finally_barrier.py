"""Lesson 02: the mistake of a collective in ``finally``. A rank that raised waits there, and the job
is reported only when the group's timeout ends the wait, with the root error out of sight."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def barrier_in_finally(rank: int, world_size: int, init_method: str, bad_rank: int = 1,
                       timeout_s: float = 2.0) -> None:
    """One DDP step in which ``bad_rank`` raises between forward and backward, with the barrier in
    ``finally``: the failed rank waits in it while the others wait in backward's all-reduce. The
    group's timeout is ``timeout_s`` seconds."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    try:
        torch.manual_seed(rank)
        model = DistributedDataParallel(nn.Linear(10, 5))
        loss = model(torch.randn(20, 10)).sum()
        if rank == bad_rank:
            raise ValueError(f"rank {rank} of {world_size} fails in its step")
        loss.backward()  # the other ranks wait here for the failed rank's gradients
    finally:
        dist.barrier()  # the mistake: a collective in `finally` keeps the failed rank waiting too
        dist.destroy_process_group()
