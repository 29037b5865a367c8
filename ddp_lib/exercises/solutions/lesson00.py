"""Lesson 00, exercise 2: a worker that joins the group and learns every rank's name."""

import torch.distributed as dist

from ddp_lib.process_group import process_group


def who_am_i(rank: int, world_size: int, name: str) -> dict:
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)  # fills everyone[r] with rank r's name, on every rank
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
