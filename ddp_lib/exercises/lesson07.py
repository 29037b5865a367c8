"""Checker for lesson 07's exercise: ``evaluate(rank, world_size, metric)`` returns the mean of the
ranks' metrics (each drawn in its rank) on every rank, without hanging; counts collectives."""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import check_on_ranks, counting_collectives, load_worker, names_called, worker_name

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "gather_object", "broadcast",
               "broadcast_object_list")


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    metric = round(random.uniform(0.01, 0.99), 6)
    with counting_collectives(*COLLECTIVES) as calls:
        value = load_worker(target)(rank, world_size, metric)
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        value = value.item()  # a one-element tensor is a number written differently
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        value = f"a {type(value).__name__}"
    return {"metric": metric, "value": value if isinstance(value, str) else float(value),
            "called": names_called(calls)}


def _judge(results: list[dict]) -> tuple[str | None, str]:
    want = sum(r["metric"] for r in results) / len(results)
    where = f"world_size {len(results)}, metrics {[r['metric'] for r in results]}"
    silent = [rank for rank, r in enumerate(results) if not r["called"]]
    wrong = [(rank, r["value"]) for rank, r in enumerate(results)
             if isinstance(r["value"], str) or not math.isclose(r["value"], want, rel_tol=1e-5)]
    passed = f"{where}: every rank returned the mean {want:.4g}"
    if wrong and silent:
        return (f"{where}: rank {silent[0]} ran no collective; a rank knows only its own metric, so the mean "
                "needs one that every rank calls (all_reduce)"), passed
    if wrong:
        rank, got = wrong[0]
        return (f"{where}: rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected the "
                f"mean {want:.4g} on every rank"), passed
    return None, passed


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30):
    """A report on ``fn(rank, world_size, metric)`` on each world size, with a deadline; one line per world size."""
    return check_on_ranks(_run_learner, world_sizes, _judge, (worker_name(fn),), timeout=timeout)
