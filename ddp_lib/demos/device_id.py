"""Lesson 03: what ``init_process_group(device_id=...)`` changes (nccl, GPUs only)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def bound_device(rank: int, world_size: int, use_device_id: bool) -> dict:
    """Join an nccl group after ``set_device(local_rank)``, with or without ``device_id``; return
    the device the group is bound to (None without device_id: its communicator forms lazily, at
    the first collective) and the sum of an all-reduce of ones."""
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world_size,
                            device_id=device if use_device_id else None)
    try:
        bound = dist.group.WORLD.bound_device_id
        tensor = torch.ones(1, device=device)
        dist.all_reduce(tensor)
        return {"bound_device_id": None if bound is None else str(bound), "sum": tensor.item()}
    finally:
        dist.destroy_process_group()
