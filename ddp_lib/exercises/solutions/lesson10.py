"""Lesson 10, exercise 1: the bytes of optimizer state this rank holds, under DDP, ZeRO-1 or FSDP2."""

import torch
from torch.distributed.tensor import DTensor


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer: this rank's shard
    total = 0
    for state in inner.state.values():
        for t in state.values():
            if isinstance(t, torch.Tensor):
                t = t.to_local() if isinstance(t, DTensor) else t
                total += t.numel() * t.element_size()
    return total
