"""Lesson 07's diagnosis exercise: a short job that fails on rank 0 alone. The exercise finds the
function with the stray collective from the error's traceback, before reading this file.
"""

from __future__ import annotations

from datetime import timedelta


def train(rank: int, world_size: int, steps: int = 3, timeout_s: float = 3.0) -> float:
    """Every step, every rank all-reduces a number, then reports. Returns the running total."""
    import torch
    import torch.distributed as dist

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        total = torch.zeros(1)
        for step in range(steps):
            value = torch.tensor([float(rank + step)])
            dist.all_reduce(value)  # every rank calls this one
            total += value
            _report(rank, step, steps, total)
        return total.item()


def _report(rank: int, step: int, steps: int, total) -> None:
    """Prints progress; on the last step, rank 0 also keeps the best total."""
    if rank == 0 and step == steps - 1:
        print(f"step {step}: best total {_best_so_far(total)}")


def _best_so_far(total) -> float:
    """The bug: a collective that only rank 0 reaches, through ``_report``."""
    import torch.distributed as dist

    best = total.clone()
    dist.all_reduce(best, op=dist.ReduceOp.MAX)
    return best.item()
