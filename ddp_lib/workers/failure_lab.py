"""The classic distributed failures, each reproduced on purpose for lesson 07.

Every worker fails fast: process groups get a short timeout, so a hang becomes an error within
seconds. Each returns (or raises) what the lesson shows; the fixed variants return normally.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import process_group

SHORT = timedelta(seconds=3)


def evaluate_on_rank0_only(rank: int, world_size: int, monitored: bool = False, fixed: bool = False) -> float:
    """Rank 0 "evaluates" with an all_reduce while the other ranks are busy elsewhere.

    Without a barrier rank 0 waits in the collective until the group's timeout (3 s here);
    ``monitored`` first calls monitored_barrier, which names the ranks that did not arrive.
    ``fixed`` has every rank take part in the evaluation.
    """
    with process_group(rank, world_size, timeout=SHORT):
        metric = torch.tensor([float(rank + 1)])
        if fixed or rank == 0:
            if monitored:
                dist.monitored_barrier(timeout=SHORT, wait_all_ranks=True)
            dist.all_reduce(metric)
        else:
            time.sleep(30)  # training on; the launcher stops this rank once rank 0 has failed
        return metric.item()


def mismatched_shapes(rank: int, world_size: int) -> list[float]:
    """Each rank all-reduces a tensor of a different length (rank + 2 elements)."""
    with process_group(rank, world_size, timeout=SHORT):
        t = torch.ones(rank + 2)
        dist.all_reduce(t)
        # A rank that "succeeds" returns nothing if another rank fails: say what it computed.
        print(f"rank {rank} finished its all_reduce with {t.tolist()}", flush=True)
        return t.tolist()


def unused_parameter(rank: int, world_size: int, find_unused_parameters: bool = False) -> list[float]:
    """A model with a branch that forward never uses; two training steps under DDP."""

    with process_group(rank, world_size, timeout=SHORT):
        torch.manual_seed(0)
        model = _TwoHeads()
        ddp = DDP(model, find_unused_parameters=find_unused_parameters)
        losses = []
        for _ in range(2):
            loss = ddp(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            losses.append(round(loss.item(), 4))
        return losses


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 1)
        self.unused = nn.Linear(4, 1)  # never called in forward: it gets no gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def device_ids_on_cpu(rank: int, world_size: int) -> str:
    """DDP(model, device_ids=[rank]) with the model on the CPU."""
    with process_group(rank, world_size):
        DDP(nn.Linear(2, 2), device_ids=[rank])
        return "constructed"


def sampler_orders(rank: int, world_size: int, call_set_epoch: bool, epochs: int = 3) -> list[list[int]]:
    """The sample indices this rank sees in each epoch, from a shuffling DistributedSampler."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(8), num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    orders = []
    for epoch in range(epochs):
        if call_set_epoch:
            sampler.set_epoch(epoch)  # reshuffles: the permutation is seeded with seed + epoch
        orders.append(list(sampler))
    return orders
