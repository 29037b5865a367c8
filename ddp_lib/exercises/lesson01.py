"""Checker for lesson 01's exercise: the mean over ranks of a value only each rank knows.

The learner writes ``mean_across_ranks(rank, world_size, x) -> float``: each rank is given its own
``x``, and every rank must return the mean of all ranks' ``x``, computed with an all-reduce.
Each rank draws its ``x`` itself, from fresh randomness, just before calling the worker, and
returns it beside the answer: no process holds another rank's value, so only a worker that
communicates can know the mean. The values have fractional parts, so integer arithmetic gives a
different answer. The all-reduce is counted however it was called (``dist.all_reduce``, a name
imported from ``torch.distributed``, ``distributed_c10d.all_reduce``, a ``ProcessGroup`` method), and
it must carry the rank's own ``x`` (or ``x / world_size``) over all ranks: a token all-reduce, or one
in a group of one rank, beside values swapped another way (the store, all_gather) is not the
exercise. The answer is turned into a plain float inside the rank, so no object of the learner's
runs in the checking process, where all values meet.

    print(check_mean_across_ranks(mean_across_ranks))
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    Report,
    load_worker,
    run_on_ranks,
    watching_collectives,
    worker_name,
)

ALL_REDUCE = "allreduce_"  # c10d's operator name for every all-reduce
ALL_REDUCES = (ALL_REDUCE, "all_reduce", "all_reduce_")  # and the functional collectives' names
REDUCE = "reduce_"


def _draw_value() -> float:
    """A value between 1.1 and 99.9 with a fractional part of at least 0.1, from the OS's randomness."""
    draw = random.SystemRandom()
    return draw.randint(1, 99) + draw.randint(1, 9) / 10


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: draws this rank's value, runs the learner's worker on it, counting the
    collectives it ran; returns the value beside the answer (a plain float, or its kind)."""
    x = _draw_value()
    with watching_collectives() as watched:
        answer = load_worker(target)(rank, world_size, x)
    calls, sent = watched.counts, watched.inputs
    if isinstance(answer, numbers.Real) and not isinstance(answer, bool):
        # Converted here, where no other rank's value exists: float.__float__ drops any subclass.
        answer = float.__float__(float(answer))
    else:
        answer = f"<{type(answer).__name__}>"  # a tensor, a string...: report its kind only
    # The first values of every tensor this rank gave an all-reduce over every rank (one in a
    # group of this rank alone combines nothing), however it was called.
    reduced = [float(v) for op, values in sent.over(world_size).by_op if op in ALL_REDUCES for v in values[:16]]
    carried_x = any(_close(v, x) or _close(v, x / world_size) for v in reduced)
    return {"x": x, "answer": answer, "calls": dict(calls), "carried_x": carried_x}


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
    if float(value).is_integer():
        return (f"rank {rank} returned {value:g}, a whole number for a mean of {total / world_size:g}: integer "
                "arithmetic; use a float tensor (dtype=torch.float32) and /")
    if _close(value, total / world_size ** 2):
        return f"rank {rank} returned {value:g}: divided by world_size twice"
    return f"rank {rank} returned {value:g}, expected {total / world_size:g}"


def _check_world_size(target: str, world_size: int, timeout: float, report: Report) -> None:
    runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
    if runs is None:
        return
    values = [run["x"] for run in runs]
    where = f"world_size {world_size}, values {values}"
    if not any(run["calls"].get(ALL_REDUCE) for run in runs):
        report.fail(f"{where}: no rank ran an all-reduce; the exercise is to combine the values with one")
    numbers_by_rank = {}
    for rank, run in enumerate(runs):
        answer = run["answer"]
        if not isinstance(answer, float):
            kind = answer.strip("<>")
            fix = " (call .item() on it)" if kind == "Tensor" else " (return the mean as a float)"
            report.fail(f"{where}: rank {rank} returned a {kind}, not a number{fix}")
        else:
            numbers_by_rank[rank] = float(answer)
    if len(numbers_by_rank) < world_size:
        return
    mean = sum(values) / world_size
    right = [r for r, v in numbers_by_rank.items() if _close(v, mean)]
    if len(right) == world_size:
        if not all(run["carried_x"] for run in runs):
            report.fail(f"{where}: every rank returned the mean, but no all-reduce over all ranks carried each "
                        "rank's x; the values travelled another way: all-reduce a tensor holding x")
        elif any(run["calls"].get(ALL_REDUCE) for run in runs):
            report.ok(f"{where}: every rank returned the mean {mean:g}")
    elif right == [0] and any(run["calls"].get(REDUCE) for run in runs):
        report.fail(f"{where}: only rank 0 has the mean {mean:g}; dist.reduce leaves it on the destination rank "
                    "only, all_reduce on every rank")
    else:
        for rank, value in numbers_by_rank.items():
            if rank not in right:
                report.fail(f"{where}: {_diagnose(rank, value, values)}")


def check_mean_across_ranks(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0) -> Report:
    """Run ``fn(rank, world_size, x)`` on each world size, every rank with an ``x`` of its own
    drawn inside that rank; report, per rank, what is right or wrong."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        _check_world_size(target, world_size, timeout, report)
    return report
