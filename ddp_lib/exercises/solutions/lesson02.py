"""Lesson 02, exercise 1: put a round-robin split back together. Exercise 2: a launch plan for mp.spawn."""

import torch.distributed as dist

from ddp_lib.process_group import process_group
from ddp_lib.workers.spawning import record_args


def reassemble(rank: int, world_size: int, share: list) -> list:
    with process_group(rank, world_size):
        shares = [None] * world_size
        dist.all_gather_object(shares, share)  # every rank's share, on every rank, in rank order
    n = sum(len(s) for s in shares)
    # Round robin: item i went to rank i % world_size, as its (i // world_size)-th item.
    return [shares[i % world_size][i // world_size] for i in range(n)]


def plan_launch(world_size: int, out_dir: str) -> dict:
    # The worker imported from a module; args holds what follows the rank, as a tuple (note the comma).
    return dict(fn=record_args, args=(world_size, out_dir), nprocs=world_size)
