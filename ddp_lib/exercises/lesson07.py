"""Checker for lesson 07's exercise: ``evaluate(rank, world_size, metric)`` returns the mean of the
ranks' metrics (drawn at check time) on every rank, without hanging; counts collectives."""

import math
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import COLLECTIVES, as_number, check_on_ranks, names_called, run_counted, worker_name


def _judge(results: list[dict], metrics: list[float]) -> tuple[str | None, str]:
    want = sum(metrics[:len(results)]) / len(results)
    silent = [rank for rank, r in enumerate(results) if not names_called(r["calls"])]
    wrong = [(rank, value) for rank, value in enumerate(as_number(r["result"]) for r in results)
             if isinstance(value, str) or not math.isclose(value, want, rel_tol=1e-5)]
    passed = f"every rank returned the mean {want:.4g}"
    if wrong and silent:
        return (f"rank {silent[0]} ran no collective; a rank knows only its own metric, so the mean needs one that "
                "every rank calls (all_reduce)"), passed
    if wrong:
        rank, got = wrong[0]
        return (f"rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected the mean "
                f"{want:.4g} on every rank"), passed
    return None, passed


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30):
    """A report on ``fn(rank, world_size, metric)`` on each world size, with a deadline; one line per world size."""
    metrics = [round(random.uniform(0.01, 0.99), 6) for _ in range(max(world_sizes))]
    return check_on_ranks(run_counted, world_sizes, lambda runs: _judge(runs, metrics),
                          (worker_name(fn), COLLECTIVES, metrics), timeout=timeout,
                          where=lambda runs: f"world_size {len(runs)}, metrics {metrics[:len(runs)]}")
