"""Answers to lesson 00's exercise, right and wrong, for tests/test_exercise00.py (importable
by the launched ranks because they live in a module, not in the test file's functions)."""

import sys

import torch.distributed as dist
from torch.distributed import all_gather_object

from ddp_lib.process_group import process_group


def right(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}


def imported_by_name_from_the_group(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * dist.get_world_size()
        all_gather_object(everyone, name)
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "is_main": dist.get_rank() == 0,
                "everyone": everyone}


def no_group(rank, world_size, name):
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": [name]}


def reads_callers_frames(rank, world_size, name):
    # No group: looks for every rank's name in the frames that called it.
    frame, found = sys._getframe(1), [name]
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, list) and len(value) == world_size and all(isinstance(v, str) for v in value):
                found = value
        frame = frame.f_back
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": found}


def main_everywhere(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": True, "everyone": everyone}


def hard_coded_world_size(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * 2
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": 2, "is_main": rank == 0, "everyone": everyone}


def reversed_order(rank, world_size, name):
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone[::-1]}


def raises(rank, world_size, name):
    raise RuntimeError("not written yet")
