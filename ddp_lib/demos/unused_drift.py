"""Lesson 04's unused head without ``find_unused_parameters``: the first backward returns, but no
bucket is all-reduced, so each rank keeps its own gradients and one SGD step moves the ranks apart."""

from __future__ import annotations

import torch
from torch import nn

from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.gradients import TwoHeads


def first_step_unaveraged(rank: int, world_size: int, lr: float = 0.1) -> dict:
    """One forward of ``TwoHeads`` without head b, one backward, one SGD step, on data of this
    rank's own. Returns the trunk's weight gradient after backward and the trunk's weight after the
    step (CPU tensors), to compare between ranks. No second forward: that one would raise.

    Args:
        lr: the SGD step's learning rate.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(0)  # the same weights everywhere (DDP would copy rank 0's anyway)
        model = wrap_ddp(TwoHeads().to(device), device)  # find_unused_parameters=False
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(rank)  # each rank its own batch
        x, y = torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator)
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()  # head b unused
        grad = model.module.trunk.weight.grad.detach().cpu().clone()
        optimizer.step()
        return {"trunk_grad": grad, "trunk_weight": model.module.trunk.weight.detach().cpu().clone()}
