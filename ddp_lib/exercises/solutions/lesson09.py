"""Lesson 09, exercises 1, 2 and 4: an exact distributed evaluation, a step that accumulates and clips, and
the mean of the ranks' accuracies (the shortcut that exercise 1 replaces)."""

from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler


def evaluate(model: nn.Module, dataset, rank: int, world_size: int) -> float:
    # The starting point, fixed. Subset(dataset, range(rank, len(dataset), world_size)) reads the same
    # samples without relying on the sampler's layout: plain_train.evaluate does that.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    counts = torch.zeros(2, dtype=torch.float64)  # correct, counted
    with torch.no_grad():
        for i, index in enumerate(sampler):
            if rank + i * world_size >= len(dataset):  # a padding duplicate
                continue
            x, y = dataset[index]
            counts[0] += float(model(x.unsqueeze(0)).argmax(1).item() == y.item())
            counts[1] += 1
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def train_step(ddp_model: nn.Module, optimizer: torch.optim.Optimizer,
               micro_batches: list[tuple[torch.Tensor, torch.Tensor]], max_norm: float) -> None:
    for k, (x, y) in enumerate(micro_batches):
        # All but the last under no_sync, forward included: DDP decides there whether the backward all-reduces.
        with ddp_model.no_sync() if k < len(micro_batches) - 1 else nullcontext():
            loss = nn.functional.cross_entropy(ddp_model(x), y) / len(micro_batches)
            loss.backward()
    nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()


def rank_mean(right: torch.Tensor, world_size: int) -> float:
    accuracies = []
    for rank in range(world_size):  # each rank's shard, padding included, as its sampler gives it
        shard = list(DistributedSampler(range(len(right)), num_replicas=world_size, rank=rank, shuffle=False))
        accuracies.append(right[shard].double().mean().item())
    return sum(accuracies) / world_size
