"""Checker for lesson 01's exercise: ``mean_across_ranks(rank, world_size, x)`` returns, on every
rank, the mean of the ranks' ``x`` (each drawn in its rank) by an all-reduce; names the mistake."""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    MISSING_WAIT,
    check_on_ranks,
    counting_collectives,
    load_worker,
    names_called,
    unwaited,
    worker_name,
)

COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "broadcast")


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    x = random.randint(1, 99) + random.randint(1, 9) / 10  # a fractional part: integer arithmetic shows
    with counting_collectives(*COLLECTIVES) as calls:
        answer = load_worker(target)(rank, world_size, x)
    # A tensor is reported as its kind (the fix is .item()), as is anything else that is not a number.
    if not isinstance(answer, numbers.Real) or isinstance(answer, bool):
        answer = f"a {type(answer).__name__}"
    return {"x": x, "answer": answer if isinstance(answer, str) else float(answer), "calls": calls}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def _diagnose(runs: list[dict]) -> str | None:
    """The mistake these ranks' answers show, named with its fix (None: they are right)."""
    values = [run["x"] for run in runs]
    world_size, total = len(values), sum(values)
    mean = total / world_size
    calls = [call for run in runs for call in run["calls"]]
    called, late = names_called(calls), unwaited(calls)
    ops = {call["op"] for call in calls if call["name"] == "all_reduce"} - {"SUM", None}
    answers = [run["answer"] for run in runs]
    if late:
        return MISSING_WAIT.format(late[0])
    kind = next((a for a in answers if isinstance(a, str)), None)
    if kind:
        return f"a rank returned {kind}, not a number" + (" (call .item() on it)" if "Tensor" in kind else "")
    wrong = [(rank, a) for rank, a in enumerate(answers) if not _close(a, mean)]
    if not called:  # a right mean came through a route not counted (a ProcessGroup method)
        return "no collective ran: a rank knows only its own value; combine them with all_reduce" if wrong else None
    if "all_reduce" not in called:
        return f"the ranks combined their values with {', '.join(called)}; the exercise is dist.all_reduce"
    if ops:
        return (f"an all-reduce ran, but with op={', '.join(sorted(ops))}: the default op "
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


def _judge(runs: list[dict]) -> tuple[str | None, str]:
    values = [run["x"] for run in runs]
    where = f"world_size {len(runs)}, values {values}"
    problem = _diagnose(runs)
    return problem and f"{where}: {problem}", f"{where}: every rank returned the mean {sum(values) / len(runs):g}"


def check_mean_across_ranks(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0):
    """A report on ``fn(rank, world_size, x)`` on each world size: one line per world size."""
    return check_on_ranks(_run_learner, world_sizes, _judge, (worker_name(fn),), timeout=timeout)
