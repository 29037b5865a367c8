"""Lesson 10, exercise 1: the bytes of optimizer state this rank holds, under DDP, ZeRO-1 or FSDP2."""

import torch
from torch.distributed.tensor import DTensor


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer: this rank's shard
    tensors = [t for state in inner.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]  # FSDP2: this rank's part
    return sum(t.numel() * t.element_size() for t in local)
