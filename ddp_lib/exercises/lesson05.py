"""Checker for lesson 05's exercise: ``epoch_indices(rank, world_size, epochs, seed)``, each rank's
DistributedSampler indices per epoch, on 2 ranks then 3 or 5 (which pad), epochs and seed drawn."""

import math
import random
from collections import Counter
from collections.abc import Callable

from ddp_lib.exercises.checking import check_on_ranks
from ddp_lib.exercises.solutions.lesson05 import epoch_indices
from ddp_lib.workers.shared import make_moons

# 512 samples divide by 2 (nothing read twice) but by neither 3 nor 5 (the sampler pads 1 or 3).
PADDED_WORLD_SIZES = (3, 5)
EPOCH_CHOICES = range(2, 6)  # drawn without repeats: a fixed number of epochs matches one run at most
HINTS = ((r"Default process group has not been initialized",
          "DistributedSampler asks the process group for num_replicas and rank unless it is given them, and this "
          "worker joins none: pass num_replicas=world_size and rank=rank"),)


def diagnose(results: list, epochs: int, seed: int) -> str | None:
    """The first mistake in per-rank lists of indices per epoch, named with its fix (None: all right)."""
    world_size, n_samples = len(results), len(make_moons())
    for rank, value in enumerate(results):
        if not isinstance(value, list) or len(value) != epochs or not all(
                isinstance(indices, list) and all(isinstance(i, int) for i in indices) for indices in value):
            return (f"rank {rank} returned {type(value).__name__} {str(value)[:60]}; expected one list of ints "
                    f"(e.g. list(sampler)) per epoch: {epochs} lists, one for each of the `epochs` it was given")
    each = math.ceil(n_samples / world_size)  # drop_last=False: the sampler pads
    padding = each * world_size - n_samples
    for epoch in range(epochs):
        for rank, per_epoch in enumerate(results):
            if len(per_epoch[epoch]) != each:
                return (f"rank {rank} reads {len(per_epoch[epoch])} samples in epoch {epoch}; DistributedSampler "
                        f"gives every one of {world_size} ranks {each} of the {n_samples}"
                        + (f" (it repeats {padding} so that every rank gets as many)" if padding else ""))
        reads = Counter(i for per_epoch in results for i in per_epoch[epoch])
        twice = sum(reads.values()) - len(reads)
        if twice > padding:
            sample = next(i for i, n in reads.items() if n > 1)
            ranks = [r for r, per_epoch in enumerate(results) if sample in per_epoch[epoch]]
            return (f"epoch {epoch}: ranks {ranks[0]} and {ranks[1]} both read sample {sample}"
                    + (f" ({twice} repeats where padding makes {padding})" if padding else "")
                    + "; give DistributedSampler num_replicas=world_size and rank=rank, and the same seed on "
                      "every rank")
    for rank, per_epoch in enumerate(results):
        if per_epoch[0] == [i % n_samples for i in range(rank, each * world_size, world_size)]:
            return f"rank {rank} reads samples in dataset order; create the sampler with shuffle=True"
        for epoch in range(1, epochs):
            if per_epoch[epoch] == per_epoch[epoch - 1]:
                return (f"rank {rank} reads the same order in epoch {epoch} as in epoch {epoch - 1}; "
                        "call sampler.set_epoch(epoch) at the start of every epoch")
    # The solution's orders, one epoch more: set_epoch(epoch + 1) gives the next epoch's.
    reference = [epoch_indices(rank, world_size, epochs + 1, seed) for rank in range(world_size)]
    for epoch in range(epochs):
        for rank, per_epoch in enumerate(results):
            if per_epoch[epoch] == (expected := reference[rank][epoch]):
                continue
            if per_epoch[epoch] == reference[rank][epoch + 1]:
                return (f"rank {rank}'s order in epoch {epoch} is DistributedSampler's for epoch {epoch + 1}: epochs "
                        "count from 0; call sampler.set_epoch(epoch) with epoch from range(epochs)")
            at = next(i for i, (a, b) in enumerate(zip(per_epoch[epoch], expected)) if a != b)
            return (f"rank {rank}'s order in epoch {epoch} is not DistributedSampler's for the seed the "
                    f"checker passed ({seed}) and that epoch (first difference at position {at}): build the "
                    "sampler with seed=seed, shuffle=True, and call sampler.set_epoch(epoch) with the epoch number")
    return None


def check_epoch_indices(fn: Callable, plan: list[tuple[int, int]] | None = None, seed: int | None = None):
    """A report on ``fn(rank, world_size, epochs, seed)`` for each (world_size, epochs) of ``plan``, by default
    2 ranks then 3 or 5, distinct epoch counts drawn now; ``seed`` drawn now unless given."""
    seed = random.randint(1, 9999) if seed is None else seed
    epochs = dict(plan or zip((2, random.choice(PADDED_WORLD_SIZES)), random.sample(EPOCH_CHOICES, 2)))

    def judge(results: list) -> tuple[str | None, str]:
        return diagnose(results, epochs[len(results)], seed), (f"with seed {seed}, in every epoch every rank reads "
                                                               "DistributedSampler's share for that seed and epoch")
    return check_on_ranks(fn, tuple(epochs), judge, lambda world_size: (epochs[world_size], seed), stop=True,
                          where=lambda runs: f"world_size {len(runs)}, {epochs[len(runs)]} epochs", timeout=120,
                          hints=HINTS)
