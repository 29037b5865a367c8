"""Checker for lesson 01's exercise: the mean over ranks of a value only each rank knows.

The learner writes ``mean_across_ranks(rank, world_size, x) -> float``: each rank is given its own
``x``, and every rank must return the mean of all ranks' ``x``, computed with ``dist.all_reduce``.
The checker draws the values when it runs, so only a worker that communicates can know the mean.

    print(check_mean_across_ranks(mean_across_ranks))
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import Report, counting_calls, load_worker, run_on_ranks, worker_name


def _run_learner(rank: int, world_size: int, target: str, values: list[float]) -> dict:
    """Runs in each rank: the learner's worker on this rank's value, counting its collectives."""
    with counting_calls("all_reduce", "reduce") as calls:
        value = load_worker(target)(rank, world_size, values[rank])
    if hasattr(value, "detach"):  # a tensor: report its kind, not the tensor
        value = f"<{type(value).__name__}>"
    return {"value": value, "calls": dict(calls)}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def _diagnose(rank: int, value: float, values: list[float]) -> str:
    """Why ``value`` from ``rank`` is not the mean: the usual mistakes, named."""
    world_size, total = len(values), sum(values)
    if _close(value, values[rank]):
        return (f"rank {rank} returned {value:g}, its own value: "
                "it never combined values with the other ranks (dist.all_reduce)")
    if _close(value, total):
        return f"rank {rank} returned {value:g}, the sum over ranks: divide by world_size to get the mean"
    if _close(value, math.floor(total / world_size)):
        return (f"rank {rank} returned {value:g}, the mean rounded down: integer arithmetic; "
                "use a float tensor (dtype=torch.float32)")
    if _close(value, total / world_size ** 2):
        return f"rank {rank} returned {value:g}: divided by world_size twice"
    return f"rank {rank} returned {value:g}, expected {total / world_size:g}"


def _check_world_size(target: str, world_size: int, timeout: float, rng: random.Random, report: Report) -> None:
    values = [float(rng.randint(1, 99)) for _ in range(world_size)]
    where = f"world_size {world_size}, values {values}"
    runs = run_on_ranks(_run_learner, world_size, report, (target, values), timeout=timeout)
    if runs is None:
        return
    if not any(run["calls"]["all_reduce"] for run in runs):
        report.fail(f"{where}: no rank called dist.all_reduce; the exercise is to use it")
    numbers_by_rank = {}
    for rank, run in enumerate(runs):
        value = run["value"]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            kind = value.strip("<>") if isinstance(value, str) and value.startswith("<") else type(value).__name__
            fix = " (call .item() on it)" if kind == "Tensor" else " (return the mean as a float)"
            report.fail(f"{where}: rank {rank} returned a {kind}, not a number{fix}")
        else:
            numbers_by_rank[rank] = float(value)
    if len(numbers_by_rank) < world_size:
        return
    mean = sum(values) / world_size
    right = [r for r, v in numbers_by_rank.items() if _close(v, mean)]
    if len(right) == world_size:
        report.ok(f"{where}: every rank returned the mean {mean:g}")
    elif right == [0] and any(run["calls"]["reduce"] for run in runs):
        report.fail(f"{where}: only rank 0 has the mean {mean:g}; dist.reduce leaves it on the destination rank "
                    "only, all_reduce on every rank")
    else:
        for rank, value in numbers_by_rank.items():
            if rank not in right:
                report.fail(f"{where}: {_diagnose(rank, value, values)}")


def check_mean_across_ranks(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0,
                            seed: int | None = None) -> Report:
    """Run ``fn(rank, world_size, x)`` with values drawn now (or from ``seed``) on each world
    size; report, per rank, what is right or wrong."""
    report = Report()
    rng = random.Random(seed)
    target = worker_name(fn)
    for world_size in world_sizes:
        _check_world_size(target, world_size, timeout, rng, report)
    return report
