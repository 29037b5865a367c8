"""Checker for lesson 01's exercise: the mean over ranks of a value only each rank knows.

The learner writes ``mean_across_ranks(rank, world_size, x) -> float``: every rank must return
the mean of all ranks' ``x``, computed with an all-reduce. Each rank draws its ``x`` (with a
fractional part, so integer arithmetic shows) just before calling the worker, and the checker
counts the collectives the worker called. On 2 and then 3 ranks: a divisor written as 2 is right
only on 2.

    print(check_mean_across_ranks(mean_across_ranks))
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    MISSING_WAIT,
    Report,
    counting_collectives,
    load_worker,
    names_called,
    run_on_ranks,
    unwaited,
    worker_name,
)

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "broadcast")


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: this rank's value, drawn now, the learner's answer and its collectives."""
    x = random.randint(1, 99) + random.randint(1, 9) / 10
    with counting_collectives(*COLLECTIVES) as calls:
        answer = load_worker(target)(rank, world_size, x)
    if hasattr(answer, "item") and getattr(answer, "numel", lambda: 0)() == 1:
        answer = f"a {type(answer).__name__}"  # reported as its kind: the fix is .item()
    elif not isinstance(answer, numbers.Real) or isinstance(answer, bool):
        answer = f"a {type(answer).__name__}"
    return {"x": x, "answer": answer if isinstance(answer, str) else float(answer), "calls": calls}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def _diagnose(runs: list[dict]) -> str | None:
    """The mistake these ranks' answers show, named with its fix (None: they are right)."""
    values = [run["x"] for run in runs]
    world_size, total = len(values), sum(values)
    mean = total / world_size
    called = names_called([call for run in runs for call in run["calls"]])
    ops = {call["op"] for run in runs for call in run["calls"] if call["name"] == "all_reduce"}
    late = unwaited([call for run in runs for call in run["calls"]])
    answers = [run["answer"] for run in runs]
    if late:
        return MISSING_WAIT.format(late[0])
    if any(isinstance(a, str) for a in answers):
        kind = next(a for a in answers if isinstance(a, str))
        return f"a rank returned {kind}, not a number" + (" (call .item() on it)" if "Tensor" in kind else "")
    wrong = [(rank, a) for rank, a in enumerate(answers) if not _close(a, mean)]
    if not called:  # a right mean came through a route not counted (a ProcessGroup method)
        return "no collective ran: a rank knows only its own value; combine them with all_reduce" if wrong else None
    if "all_reduce" not in called:
        return f"the ranks combined their values with {', '.join(called)}; the exercise is dist.all_reduce"
    if ops - {"SUM", None}:
        return (f"an all-reduce ran, but with op={', '.join(sorted(ops - {'SUM', None}))}: the default op "
                "(ReduceOp.SUM) then / world_size gives the mean")
    if not wrong:
        return None
    rank, value = wrong[0]
    if "reduce" in called and [r for r, _ in wrong] == list(range(1, world_size)):
        return "only rank 0 has the mean: dist.reduce leaves it on the destination rank; all_reduce on every rank"
    if _close(value, total):
        return f"rank {rank} returned {value:g}, the sum over ranks: divide by world_size to get the mean"
    divisor = total / value if value else 0
    if divisor and _close(divisor, world_size ** 2):
        return f"rank {rank} returned {value:g}: divided by world_size twice"
    if divisor and _close(divisor, round(divisor)) and round(divisor) != world_size:
        return (f"rank {rank} returned {value:g}, the sum divided by {round(divisor)}, a constant: divide by "
                f"world_size ({world_size} here)")
    if float(value).is_integer():
        return (f"rank {rank} returned {value:g}, a whole number for a mean of {mean:g}: integer arithmetic; "
                "use a float tensor (dtype=torch.float32)")
    return f"rank {rank} returned {value:g}, expected the mean {mean:g}"


def check_mean_across_ranks(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0) -> Report:
    """Run ``fn(rank, world_size, x)`` on each world size, every rank with its own ``x``; one
    line per world size."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
        if runs is None:
            continue
        where = f"world_size {world_size}, values {[run['x'] for run in runs]}"
        problem = _diagnose(runs)
        if problem:
            report.fail(f"{where}: {problem}")
        else:
            report.ok(f"{where}: every rank returned the mean {sum(run['x'] for run in runs) / world_size:g}")
    return report
