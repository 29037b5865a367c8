"""Answers to lesson 01's exercise, right and wrong, for tests/test_exercise01.py (importable
by the launched ranks because they live in a module, not in the test file's functions)."""

import gc
import sys

import torch
import torch.distributed as dist
from torch.distributed import all_reduce, distributed_c10d

from ddp_lib.process_group import process_group


def correct(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.all_reduce(t)
        return (t / world_size).item()


def no_communication(rank, world_size, x):
    return x


def closed_form(rank, world_size, x):
    # The old exercise's answer, (r + 1) ** 2 averaged, copied without communicating.
    return sum((r + 1) ** 2 for r in range(world_size)) / world_size


def gathers_instead(rank, world_size, x):
    # Right number, wrong collective: the exercise is about all_reduce.
    with process_group(rank, world_size):
        parts = [torch.zeros(1) for _ in range(world_size)]
        dist.all_gather(parts, torch.tensor([x]))
        return torch.cat(parts).mean().item()


def sum_not_mean(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.all_reduce(t)
        return t.item()


def through_distributed_c10d(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        distributed_c10d.all_reduce(t)
        return (t / world_size).item()


def imported_by_name(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        all_reduce(t)
        return (t / world_size).item()


def average_op(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t.item()


def process_group_method(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.group.WORLD.allreduce([t]).wait()
        return (t / world_size).item()


def hard_coded_world_size(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.all_reduce(t)
        return (t / 2).item()


def reads_callers_frames(rank, world_size, x):
    # No group: looks for every rank's values in the frames that called it, as a list of floats.
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, list) and len(value) == world_size and all(isinstance(v, float) for v in value):
                return sum(value) / world_size
        frame = frame.f_back
    return x


def reads_gc(rank, world_size, x):
    # No group: looks for a list of world_size floats anywhere in this process's memory.
    for obj in gc.get_objects():
        if isinstance(obj, list) and len(obj) == world_size and all(isinstance(v, float) for v in obj):
            return sum(obj) / world_size
    return x


def guessed_from_rank(rank, world_size, x):
    # Talks (so an all-reduce is counted) but answers with a number built from the ranks alone.
    with process_group(rank, world_size):
        t = torch.tensor([float(rank)])
        dist.all_reduce(t)
        return (t / world_size).item() + 50.0


def integer_tensor(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([int(x)])
        dist.all_reduce(t)
        return (t // world_size).item()


def reduce_to_rank0(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.reduce(t, dst=0)
        return (t / world_size).item() if rank == 0 else x


def returns_tensor(rank, world_size, x):
    with process_group(rank, world_size):
        t = torch.tensor([x])
        dist.all_reduce(t)
        return t / world_size


def raises(rank, world_size, x):
    if rank == 1:
        raise ValueError("forgot something")
    return 0.0


def only_rank0_communicates(rank, world_size, x):
    # Rank 0 waits for an all_reduce nobody else calls: a hang, cut short by the timeouts.
    from datetime import timedelta

    with process_group(rank, world_size, timeout=timedelta(seconds=3)):
        t = torch.tensor([x])
        if rank == 0:
            dist.all_reduce(t)
        return (t / world_size).item()


class _MeanFromTheChecker(float):
    """A float whose conversion, run in the launching process, reads the checker's locals."""

    def __float__(self):
        frame = sys._getframe(1)
        while frame is not None:
            values = frame.f_locals.get("values")
            if isinstance(values, list) and values and all(isinstance(v, float) for v in values):
                return sum(values) / len(values)
            frame = frame.f_back
        return float.__float__(self)


def number_that_reads_the_checker(rank, world_size, x):
    # A token all-reduce, then a float subclass that finds the mean when the checker converts it.
    with process_group(rank, world_size):
        dist.all_reduce(torch.zeros(1))
        return _MeanFromTheChecker(x)


def gathers_plus_token_all_reduce(rank, world_size, x):
    # The mean from all_gather; an all-reduce of nothing, only to be counted.
    with process_group(rank, world_size):
        dist.all_reduce(torch.zeros(1))
        parts = [torch.zeros(1) for _ in range(world_size)]
        dist.all_gather(parts, torch.tensor([x]))
        return torch.cat(parts).mean().item()


def through_the_store(rank, world_size, x):
    # The values swapped through the group's store; an all-reduce of nothing, only to be counted.
    with process_group(rank, world_size):
        store = distributed_c10d._get_default_store()
        store.set(f"x{rank}", repr(x))
        dist.all_reduce(torch.zeros(1))
        return sum(float(store.get(f"x{r}")) for r in range(world_size)) / world_size


def divides_first(rank, world_size, x):
    # Right, written differently: each rank sends x / world_size, and the sum is the mean.
    with process_group(rank, world_size):
        t = torch.tensor([x / world_size], dtype=torch.float64)
        dist.all_reduce(t)
        return t.item()


def all_reduce_within_itself(rank, world_size, x):
    # Every rank all-reduces its x, but in a group of its own (so nothing is combined), and takes
    # the others' values from the store.
    with process_group(rank, world_size):
        alone = [dist.new_group([r]) for r in range(world_size)][rank]
        dist.all_reduce(torch.tensor([x], dtype=torch.float64), group=alone)
        store = distributed_c10d._get_default_store()
        store.set(f"x{rank}", repr(x))
        return sum(float(store.get(f"x{r}")) for r in range(world_size)) / world_size


def forges_the_checkers_records(rank, world_size, x):
    # No group and no collective: x swapped through the launcher's store, then the records in the
    # caller's frame written to say that an all-reduce over every rank carried it.
    import collections
    import os

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    store.set(f"forged/{rank}", repr(x))
    values = [float(store.get(f"forged/{r}")) for r in range(world_size)]
    for value in sys._getframe(1).f_locals.values():
        if isinstance(value, collections.Counter):
            value.clear = lambda: None  # so that the checker's clearing keeps the forged count
            value["allreduce_"] += 1
        elif isinstance(getattr(value, "values", None), list):
            value.values.append([x])
            value.by_op = [("allreduce_", [x])]
            value.over = lambda size, value=value: value
            value.carried = lambda *args, **kwargs: True
    return sum(values) / world_size
