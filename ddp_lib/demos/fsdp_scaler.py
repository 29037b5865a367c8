"""Lesson 10's GradScaler under FSDP2: an overflow in one rank's shard alone makes every rank skip.

Each rank holds only its shard of each gradient, so a rank cannot see another rank's overflow. The
plain ``torch.amp.GradScaler`` still works: FSDP2's gradients are DTensors, and torch combines the
ranks' overflow flags by their maximum when the scaler checks them."""

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from ddp_lib.process_group import process_group


def overflow_in_one_shard(rank: int, world_size: int, width: int = 8, seed: int = 0, inject: bool = True) -> dict:
    """One FSDP2 step of a two-layer model under a GradScaler. After backward, rank 0 writes inf into
    its own shard of the first weight's gradient (``inject=False``: no inf). Returns {"rank", "own_shard_finite" (this
    rank's gradient shards all finite before the step), "stepped" (this rank's parameters changed),
    "scale_before", "scale_after"}."""
    with process_group(rank, world_size):
        torch.manual_seed(seed)  # the same seed on every rank: fully_shard broadcasts no initial weights
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        x = torch.randn(4, width, generator=torch.Generator().manual_seed(rank))
        scaler.scale(model(x).pow(2).mean()).backward()
        if inject and rank == 0:
            model[0].weight.grad.to_local()[0, 0] = float("inf")  # rank 0's rows only
        own_finite = all(bool(torch.isfinite(p.grad.to_local()).all()) for p in model.parameters())
        before = [p.to_local().clone() for p in model.parameters()]
        scale_before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stepped = any(not torch.equal(b, p.to_local()) for b, p in zip(before, model.parameters()))
        return {"rank": rank, "own_shard_finite": own_finite, "stepped": stepped,
                "scale_before": scale_before, "scale_after": scaler.get_scale()}
