"""Checker for lesson 05's exercise: a worker that says which samples its rank reads each epoch.

The learner writes ``epoch_indices(rank, world_size, epochs, seed) -> list[list[int]]`` using a
``DistributedSampler`` over ``ddp_lib.data.make_moons()``; the checker runs it on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

from ddp_lib.data import make_moons
from ddp_lib.errors import WorkerError
from ddp_lib.launch import spawn


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


def check_epoch_indices(fn: Callable, world_size: int = 2, epochs: int = 3, seed: int = 0) -> str:
    """Run ``fn(rank, world_size, epochs, seed)`` on ``world_size`` ranks; return a report that
    starts with "PASS" or "FAIL" and says what is right or wrong."""
    try:
        results = spawn(fn, world_size, args=(epochs, seed), show_output=False, timeout=120)
    except WorkerError as exc:
        return f"FAIL\n- your worker raised on rank {exc.rank}: {exc.exc_type}: {exc.message}"
    problems = find_problems(results, epochs, len(make_moons()))
    if problems:
        return "FAIL\n" + "\n".join(f"- {p}" for p in problems)
    return (f"PASS: on {world_size} ranks, every epoch splits the {len(make_moons())} samples between the ranks "
            f"with no overlap, and each rank's order changes from epoch to epoch")
