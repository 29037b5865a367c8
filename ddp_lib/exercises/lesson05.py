"""Checker for lesson 05's exercise: a worker that says which samples its rank reads each epoch.

The learner writes ``epoch_indices(rank, world_size, epochs, seed) -> list[list[int]]`` using a
``DistributedSampler`` over ``ddp_lib.workers.shared.make_moons()``; the checker runs it on 2 and then 4
ranks with a seed it draws, and compares every epoch of every rank with ``DistributedSampler``'s order
for that seed and epoch.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from torch.utils.data import DistributedSampler

from ddp_lib.exercises.checking import Report, run_on_ranks
from ddp_lib.workers.shared import make_moons

# 512 samples divide by both: the sampler pads nothing, so any sample read twice is a mistake.
WORLD_SIZES = (2, 4)


def _shape_problem(rank: int, value: object, epochs: int) -> str | None:
    if not isinstance(value, list) or len(value) != epochs:
        return (f"rank {rank} returned {type(value).__name__} {str(value)[:60]}; expected a list with one "
                f"list of sample indices per epoch ({epochs} lists)")
    for epoch, indices in enumerate(value):
        if not isinstance(indices, list) or not all(isinstance(i, int) for i in indices):
            return f"rank {rank}, epoch {epoch}: expected a list of ints (e.g. list(sampler)), got {str(indices)[:60]}"
    return None


def find_problems(results: list, epochs: int, n_samples: int) -> list[str]:
    """What is wrong with per-rank lists of indices per epoch (empty if nothing)."""
    problems = [p for r, v in enumerate(results) if (p := _shape_problem(r, v, epochs))]
    if problems:
        return problems
    world_size = len(results)
    for epoch in range(epochs):
        owner: dict[int, int] = {}  # sample index -> the first rank that read it
        for rank, per_epoch in enumerate(results):
            for i in per_epoch[epoch]:
                if owner.setdefault(i, rank) != rank:
                    return [f"epoch {epoch}: ranks {owner[i]} and {rank} both read sample {i}; give DistributedSampler "
                            "num_replicas=world_size and rank=rank, and the same seed on every rank"]
        missing = sorted(set(range(n_samples)) - set(owner))
        if missing:
            return [f"epoch {epoch}: {len(missing)} samples (e.g. {missing[:3]}) are read by no rank; "
                    "every rank must use the same DistributedSampler over the whole dataset"]
    for rank, per_epoch in enumerate(results):
        if per_epoch[0] == list(range(rank, n_samples, world_size)):
            problems.append(f"rank {rank} reads samples in dataset order; create the sampler with shuffle=True")
        for epoch in range(1, epochs):
            if per_epoch[epoch] == per_epoch[epoch - 1]:
                problems.append(f"rank {rank} reads the same order in epoch {epoch} as in epoch {epoch - 1}; "
                                "call sampler.set_epoch(epoch) at the start of every epoch")
                break
    return problems


def _reference(rank: int, world_size: int, epoch: int, seed: int) -> list[int]:
    sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def check_epoch_indices(fn: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES, epochs: int = 3,
                        seed: int | None = None) -> Report:
    """Run ``fn(rank, world_size, epochs, seed)`` on each of ``world_sizes`` ranks in turn, with a seed
    drawn now (unless given), and report what is right or wrong; stops at the first world size that fails."""
    report = Report()
    seed = random.Random().randint(1, 9999) if seed is None else seed
    n_samples = len(make_moons())
    for world_size in world_sizes:
        results = run_on_ranks(fn, world_size, report, (epochs, seed), timeout=120)
        if results is None:
            return report
        problems = find_problems(results, epochs, n_samples) or _order_problems(results, epochs, seed)
        if report.fail_each(f"world_size {world_size}", problems):
            return report
        report.ok(f"world_size {world_size}, seed {seed}: in each of the {epochs} epochs every rank reads "
                  f"DistributedSampler's share for that seed and epoch, and the {n_samples} samples are split "
                  "with no overlap")
    return report


def _order_problems(results: list, epochs: int, seed: int) -> list[str]:
    """Every epoch of every rank compared with DistributedSampler's order for the checker's seed."""
    world_size = len(results)
    for epoch in range(epochs):
        for rank, per_epoch in enumerate(results):
            expected = _reference(rank, world_size, epoch, seed)
            if per_epoch[epoch] != expected:
                at = next((i for i, (a, b) in enumerate(zip(per_epoch[epoch], expected)) if a != b),
                          min(len(per_epoch[epoch]), len(expected)))
                return [f"rank {rank}'s order in epoch {epoch} is not DistributedSampler's for the seed the "
                        f"checker passed ({seed}) and that epoch (first difference at position {at}): build the "
                        "sampler with seed=seed, shuffle=True, and call sampler.set_epoch(epoch) with the epoch number"]
    return []
