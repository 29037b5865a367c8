"""Lesson 01, exercise 1: the mean over ranks of a value only each rank knows. Exercise 5: the sum over
the even ranks, or over the odd ranks, in a subgroup."""

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group


def mean_across_ranks(rank: int, world_size: int, x: float) -> float:
    with process_group(rank, world_size) as device:
        total = torch.tensor([x], dtype=torch.float32, device=device)
        dist.all_reduce(total)  # the sum over ranks, on every rank
        return (total / world_size).item()


def sum_in_my_half(rank: int, world_size: int, x: float) -> float:
    with process_group(rank, world_size) as device:
        # Every rank makes both groups, in the same order, even the one it is not in.
        evens = dist.new_group(list(range(0, world_size, 2)))
        odds = dist.new_group(list(range(1, world_size, 2)))
        total = torch.tensor([x], dtype=torch.float32, device=device)
        dist.all_reduce(total, group=evens if rank % 2 == 0 else odds)  # only this rank's half takes part
        return total.item()
