"""Solutions to lesson 01's exercise, right and wrong, for tests/test_exercise01.py (importable
by the launched ranks because they live in a module, not in the test file's functions)."""

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group


def correct(rank, world_size):
    with process_group(rank, world_size):
        x = torch.tensor([float((rank + 1) ** 2)])
        dist.all_reduce(x)
        return (x / world_size).item()


def no_communication(rank, world_size):
    return float((rank + 1) ** 2)


def sum_not_mean(rank, world_size):
    with process_group(rank, world_size):
        x = torch.tensor([float((rank + 1) ** 2)])
        dist.all_reduce(x)
        return x.item()


def integer_tensor(rank, world_size):
    with process_group(rank, world_size):
        x = torch.tensor([(rank + 1) ** 2])
        dist.all_reduce(x)
        return (x // world_size).item()


def reduce_to_rank0(rank, world_size):
    with process_group(rank, world_size):
        x = torch.tensor([float((rank + 1) ** 2)])
        dist.reduce(x, dst=0)
        return (x / world_size).item()


def returns_tensor(rank, world_size):
    with process_group(rank, world_size):
        x = torch.tensor([float((rank + 1) ** 2)])
        dist.all_reduce(x)
        return x / world_size


def raises(rank, world_size):
    if rank == 1:
        raise ValueError("forgot something")
    return 0.0


def only_rank0_communicates(rank, world_size):
    # Rank 0 waits for an all_reduce nobody else calls: a hang, cut short by the timeouts.
    from datetime import timedelta

    with process_group(rank, world_size, timeout=timedelta(seconds=3)):
        x = torch.tensor([float((rank + 1) ** 2)])
        if rank == 0:
            dist.all_reduce(x)
        return (x / world_size).item()
