"""Checker for lesson 07's exercise: evaluation that every rank takes part in.

The worker ``evaluate(rank, world_size, metric)`` joins the process group, takes the metric it is
given (each rank its own, drawn by the checker when it runs) and returns the mean over all ranks,
the same on every rank, without hanging.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name


def _run_learner(rank: int, world_size: int, target: str, metrics: list[float]) -> object:
    """Runs in each rank: the learner's worker on this rank's metric."""
    value = load_worker(target)(rank, world_size, metrics[rank])
    return f"<{type(value).__name__}>" if hasattr(value, "detach") else value


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30,
                     seed: int | None = None) -> Report:
    """Run ``fn(rank, world_size, metric)`` with metrics drawn now (or from ``seed``) on each world
    size, with a deadline, and check every rank's returned mean."""
    report = Report()
    rng = random.Random(seed)
    target = worker_name(fn)
    for world_size in world_sizes:
        metrics = [round(rng.uniform(0, 1), 2) for _ in range(world_size)]
        want = sum(metrics) / world_size
        results = run_on_ranks(_run_learner, world_size, report, (target, metrics), timeout=timeout)
        if results is None:
            continue
        where = f"world_size {world_size}, metrics {metrics}"
        wrong = [(r, v) for r, v in enumerate(results)
                 if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v - want) > 1e-5]
        if wrong:
            rank, got = wrong[0]
            report.fail(f"{where}: rank {rank} returned {got!r}, expected the mean {want:.4g} on every rank")
        else:
            report.ok(f"{where}: every rank returned the mean {want:.4g}")
    return report
