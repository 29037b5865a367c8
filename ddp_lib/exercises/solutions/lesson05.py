"""Lesson 05, exercise 1: the samples each rank reads, epoch by epoch."""

from torch.utils.data import DistributedSampler

from ddp_lib.workers.shared import make_moons


def epoch_indices(rank: int, world_size: int, epochs: int, seed: int) -> list[list[int]]:
    # The same seed on every rank: one shared permutation, split between the ranks.
    sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    indices = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new permutation each epoch
        indices.append(list(sampler))
    return indices
