"""Lesson 07, exercise 2: an evaluation every rank takes part in."""

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group


def evaluate(rank: int, world_size: int, metric: float) -> float:
    with process_group(rank, world_size) as device:
        total = torch.tensor([metric], dtype=torch.float32, device=device)
        dist.all_reduce(total)  # every rank calls it, so nobody waits for an absent partner
        return total.item() / world_size
