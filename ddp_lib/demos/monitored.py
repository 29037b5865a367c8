"""Lesson 07: ``monitored_barrier`` in a job whose main group is nccl, through a gloo side group."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group

SHORT = timedelta(seconds=3)


def evaluate_with_side_group(rank: int, world_size: int) -> float:
    """Rank 0 alone "evaluates", as in ``failure_lab.evaluate_on_rank0_only``, but checks first with a
    ``monitored_barrier`` on a gloo group made for it. The main group may be nccl (GPUs): only gloo
    implements ``monitored_barrier``, so a job on nccl creates a gloo group beside it."""
    with process_group(rank, world_size, timeout=SHORT) as device:
        # Every rank must call new_group, even those that never use it: each process numbers its groups
        # in creation order, and that number names the group the ranks meet in.
        side_group = dist.new_group(backend="gloo", timeout=SHORT)
        metric = torch.tensor([float(rank + 1)], device=device)
        if rank == 0:
            dist.monitored_barrier(group=side_group, timeout=SHORT, wait_all_ranks=True)
            dist.all_reduce(metric)
        else:
            time.sleep(30)  # training on; the launcher stops this rank once rank 0 has failed
        return metric.item()
