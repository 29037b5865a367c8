"""Lesson 04's unused parameter without ``find_unused_parameters``: the backward returns, but DDP never
finishes the step's averaging, so each rank keeps its own gradients and one SGD step moves the ranks apart."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile

from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.gradients import TwoHeads, c10d_ops


def first_step_unaveraged(rank: int, world_size: int, lr: float = 0.1) -> dict:
    """One forward of ``TwoHeads`` without head b, one backward, one SGD step, on data of this
    rank's own. Returns ``backward_returned`` (True once ``backward()`` has returned), the trunk's
    weight gradient after backward and the trunk's weight after the step (CPU tensors), to compare
    between ranks. No second forward: that one would raise.

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
        backward_returned = True  # reached only if backward() returned, without an error or a hang
        grad = model.module.trunk.weight.grad.detach().cpu().clone()
        optimizer.step()
        return {"backward_returned": backward_returned, "trunk_grad": grad,
                "trunk_weight": model.module.trunk.weight.detach().cpu().clone()}


class InputLayerOptional(nn.Module):
    """Layer ``b`` first and used only when ``use_b``, then a trunk and a head ``a``: backward reaches
    ``b`` last, so once DDP has rebuilt its buckets, ``b``'s bucket is the last one sent."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Linear(8, 8)
        self.trunk = nn.Linear(8, 8)
        self.a = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, use_b: bool = True) -> torch.Tensor:
        return self.a(torch.tanh(self.trunk(self.b(x) if use_b else x)))


def later_step_unaveraged(rank: int, world_size: int, used_steps: int = 2, bucket_cap_mb: float = 0.0001,
                          gradient_as_bucket_view: bool = False) -> dict:
    """``used_steps`` SGD steps that use every layer of ``InputLayerOptional`` (DDP rebuilds its buckets
    after the first: one per layer with this cap), then one backward without layer b, on data of this
    rank's own. Returns the bucket all-reduces the last used step and the unused step ran, the trunk's
    weight gradient DDP leaves after the unused step (read after a barrier, so once the buckets that
    started have finished), and the one this rank computes alone.

    Args:
        gradient_as_bucket_view: DDP's option; with it, a bucket that started averages its ``.grad`` in place.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(0)
        model = wrap_ddp(InputLayerOptional().to(device), device, bucket_cap_mb=bucket_cap_mb,
                         gradient_as_bucket_view=gradient_as_bucket_view)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(rank)  # each rank its own batches
        allreduces = []
        for step in range(used_steps + 1):
            use_b = step < used_steps
            x, y = torch.randn(4, 8, generator=generator).to(device), torch.randn(4, 4, generator=generator).to(device)
            optimizer.zero_grad()
            alone = copy.deepcopy(model.module)  # the same weights, no DDP
            nn.functional.mse_loss(alone(x, use_b), y).backward()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                nn.functional.mse_loss(model(x, use_b), y).backward()
                # Without b, nothing waits for the buckets that started. gloo's barrier waits for all earlier
                # work, so the profiler stops after their all-reduces: stopped during one, it broke memory now and then.
                dist.barrier()
            allreduces.append(c10d_ops(prof).get("allreduce_", 0))
            if use_b:
                optimizer.step()
        return {
            "allreduces_used": allreduces[-2],
            "allreduces_unused": allreduces[-1],
            "trunk_grad": model.module.trunk.weight.grad.detach().cpu().clone(),
            "own_trunk_grad": alone.trunk.weight.grad.detach().cpu().clone(),
        }
