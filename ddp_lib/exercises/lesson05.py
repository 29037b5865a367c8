"""Checker for lesson 05's exercise: ``epoch_indices(rank, world_size, epochs, seed)``, the sampler's shares."""

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
          "this worker joins no process group: pass num_replicas=world_size and rank=rank"),)


def diagnose(results: list, epochs: int, seed: int) -> str | None:
    """The first mistake in per-rank lists of indices per epoch, named with its fix (None: all right)."""
    world_size, n_samples = len(results), len(make_moons())
    each = math.ceil(n_samples / world_size)  # drop_last=False: the sampler pads
    padding = each * world_size - n_samples
    for rank, value in enumerate(results):
        if not isinstance(value, list) or len(value) != epochs or not all(
                isinstance(indices, list) and all(isinstance(i, int) for i in indices) for indices in value):
            return (f"rank {rank} returned {type(value).__name__} {str(value)[:60]}; expected one list of ints "
                    f"(e.g. list(sampler)) per epoch: {epochs} lists, one for each of the `epochs` it was given")
        if (short := next((epoch for epoch, indices in enumerate(value) if len(indices) != each), None)) is not None:
            return (f"rank {rank} reads {len(value[short])} samples in epoch {short}; DistributedSampler gives every "
                    f"one of {world_size} ranks {each} of the {n_samples}"
                    + (f" (it repeats {padding} so that every rank gets as many)" if padding else ""))
    for epoch in range(epochs):
        reads = Counter(i for per_epoch in results for i in per_epoch[epoch])
        if (twice := sum(reads.values()) - len(reads)) > padding:
            sample = next(i for i, n in reads.items() if n > 1)
            ranks = [r for r, per_epoch in enumerate(results) if sample in per_epoch[epoch]]
            return (f"epoch {epoch}: ranks {ranks[0]} and {ranks[1]} both read sample {sample}"
                    + (f" ({twice} repeats where padding makes {padding})" if padding else "")
                    + "; give DistributedSampler num_replicas=world_size and rank=rank, and the same seed on "
                      "every rank")
    # The solution's orders, one epoch more: set_epoch(epoch + 1) gives the next epoch's.
    reference = [epoch_indices(rank, world_size, epochs + 1, seed) for rank in range(world_size)]
    for rank, per_epoch in enumerate(results):
        if same := next((epoch for epoch in range(1, epochs) if per_epoch[epoch] == per_epoch[epoch - 1]), None):
            return (f"rank {rank} reads the same order in epoch {same} as in epoch {same - 1}; "
                    "call sampler.set_epoch(epoch) at the start of every epoch")
        if per_epoch[:epochs] == reference[rank][1:]:
            return (f"rank {rank}'s order in epoch 0 is DistributedSampler's for epoch 1: epochs count from 0; call "
                    "sampler.set_epoch(epoch) with epoch from range(epochs)")
        for epoch, (got, expected) in enumerate(zip(per_epoch, reference[rank])):
            if got != expected:
                at = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
                return (f"rank {rank}'s order in epoch {epoch} is not DistributedSampler's for seed {seed} (first "
                        f"difference at {at}): keep shuffle=True, pass seed=seed, call sampler.set_epoch(epoch)")
    return None


def check_epoch_indices(fn: Callable, plan: list[tuple[int, int]] | None = None, seed: int | None = None):
    """A report on ``fn(rank, world_size, epochs, seed)`` per (world_size, epochs) of ``plan``; unset ones drawn now."""
    seed = random.randint(1, 9999) if seed is None else seed
    epochs = dict(plan or zip((2, random.choice(PADDED_WORLD_SIZES)), random.sample(EPOCH_CHOICES, 2)))
    return check_on_ranks(fn, tuple(epochs), lambda runs: diagnose(runs, epochs[len(runs)], seed),
                          lambda world_size: (epochs[world_size], seed), stop=True, timeout=120, hints=HINTS,
                          where=lambda runs: f"world_size {len(runs)}, {epochs[len(runs)]} epochs",
                          passed=f"with seed {seed}, in every epoch every rank reads DistributedSampler's share for "
                          "that seed and epoch")
