"""Checker for lesson 07's exercise: evaluation that every rank takes part in.

The worker ``evaluate(rank, world_size, metric)`` joins the process group, takes the metric it is
given (each rank its own, drawn in that rank) and returns the mean over all ranks, the same on
every rank, without hanging: a collective that only rank 0 calls leaves it waiting, and the
deadline's report names the call and the learner's line. The checker counts the collectives the
worker called, so that a wrong mean can be told "no collective ran".

    print(check_evaluation(evaluate))
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    Report,
    counting_collectives,
    load_worker,
    names_called,
    run_on_ranks,
    worker_name,
)

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "gather_object", "broadcast",
               "broadcast_object_list")


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: this rank's metric, drawn now, the learner's answer and its collectives."""
    metric = round(random.uniform(0.01, 0.99), 6)
    with counting_collectives(*COLLECTIVES) as calls:
        value = load_worker(target)(rank, world_size, metric)
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        value = value.item()  # a one-element tensor is a number written differently
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        value = f"a {type(value).__name__}"
    return {"metric": metric, "value": value if isinstance(value, str) else float(value),
            "called": names_called(calls)}


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30) -> Report:
    """Run ``fn(rank, world_size, metric)`` on each world size with a deadline; one line per world size."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        results = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
        if results is None:
            continue
        want = sum(r["metric"] for r in results) / world_size
        where = f"world_size {world_size}, metrics {[r['metric'] for r in results]}"
        silent = [rank for rank, r in enumerate(results) if not r["called"]]
        wrong = [(rank, r["value"]) for rank, r in enumerate(results)
                 if isinstance(r["value"], str) or not math.isclose(r["value"], want, rel_tol=1e-5)]
        if wrong and silent:
            report.fail(f"{where}: rank {silent[0]} ran no collective; a rank knows only its own metric, so the "
                        "mean needs one that every rank calls (all_reduce)")
        elif wrong:
            rank, got = wrong[0]
            report.fail(f"{where}: rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected "
                        f"the mean {want:.4g} on every rank")
        else:
            report.ok(f"{where}: every rank returned the mean {want:.4g}")
    return report
