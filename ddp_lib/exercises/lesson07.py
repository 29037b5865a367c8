"""Checker for lesson 07's exercise: ``evaluate(rank, world_size, metric)``, the mean on every rank, no hang."""

import math
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import COLLECTIVES, as_number, check_on_ranks, run_counted, worker_name


def diagnose(results: list[dict], want: float) -> str | None:
    """The mistake the ranks' answers show, named (None: every rank returned the mean ``want``)."""
    silent = [rank for rank, r in enumerate(results) if not r["called"]]
    wrong = [(rank, value) for rank, value in enumerate(as_number(r["result"]) for r in results)
             if isinstance(value, str) or not math.isclose(value, want, rel_tol=1e-5)]
    if wrong and silent:
        return (f"rank {silent[0]} ran no collective; a rank knows only its own metric, so the mean needs one that "
                "every rank calls (all_reduce)")
    if wrong:
        rank, got = wrong[0]
        return (f"rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected the mean "
                f"{want:.4g} on every rank")
    return None


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30):
    """A report on ``fn(rank, world_size, metric)`` on each world size, with a deadline; one line per world size."""
    metrics = [round(random.uniform(0.01, 0.99), 6) for _ in range(max(world_sizes))]
    mean = {size: sum(metrics[:size]) / size for size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, mean[len(runs)]),
                          (worker_name(fn), COLLECTIVES, metrics), timeout=timeout,
                          passed=lambda runs: f"every rank returned the mean {mean[len(runs)]:.4g}",
                          where=lambda runs: f"world_size {len(runs)}, metrics {metrics[:len(runs)]}")
