"""Checker for lesson 01's exercise: the mean of a rank-dependent value, with all_reduce.

The learner writes ``mean_of_squares(rank, world_size) -> float``: rank r holds x = (r + 1) ** 2
and every rank must return the mean of x over all ranks, computed with ``dist.all_reduce``.

    print(check_mean_of_squares(mean_of_squares))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError
from ddp_lib.launch import spawn
from ddp_lib.workers.point_to_point import gloo_message

HANG_HINT = ("a rank waited in a collective that another rank never called: every rank must call "
             "all_reduce, the same number of times")


@dataclass
class Report:
    """What a checker found: ``passed`` and one line per finding (✓ right, ✗ wrong)."""

    lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(line.startswith("✗") for line in self.lines)

    def ok(self, text: str) -> None:
        self.lines.append(f"✓ {text}")

    def wrong(self, text: str) -> None:
        self.lines.append(f"✗ {text}")

    def __str__(self) -> str:
        verdict = "All checks passed." if self.passed else "Not yet: fix the lines marked ✗."
        return "\n".join([*self.lines, verdict])


def own_value(rank: int) -> float:
    """What rank ``rank`` holds in the exercise."""
    return float((rank + 1) ** 2)


def expected_mean(world_size: int) -> float:
    """The answer every rank should return."""
    return sum(own_value(r) for r in range(world_size)) / world_size


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)


def _diagnose(rank: int, value: float, world_size: int, all_same: bool) -> str:
    """Why ``value`` from ``rank`` is not the mean: the usual mistakes, named."""
    total = expected_mean(world_size) * world_size
    if not all_same and _close(value, own_value(rank)):
        return (f"rank {rank} returned {value:g}, its own value: "
                "it never combined values with the other ranks (dist.all_reduce)")
    if _close(value, total):
        return f"rank {rank} returned {value:g}, the sum over ranks: divide by world_size to get the mean"
    if _close(value, math.floor(total / world_size)):
        return (f"rank {rank} returned {value:g}, the mean rounded down: integer arithmetic; "
                "use a float tensor (dtype=torch.float32)")
    if _close(value, total / world_size ** 2) or _close(value, own_value(rank) / world_size):
        return f"rank {rank} returned {value:g}: divided by world_size twice, or before summing only its own value"
    return f"rank {rank} returned {value:g}, expected {expected_mean(world_size):g}"


def _check_world_size(fn: Callable, world_size: int, timeout: float, report: Report) -> None:
    try:
        results = spawn(fn, world_size, timeout=timeout, show_output="stdout")
    except LaunchInputError as exc:
        report.wrong(f"the worker cannot be launched: {exc}")
        return
    except LaunchTimeout as exc:
        report.wrong(f"world_size {world_size}: ranks {exc.running} had not finished after {timeout:g} s; {HANG_HINT}")
        return
    except WorkerError as exc:
        message = gloo_message(exc.message)
        hint = ""
        if any(s in message for s in ("Connection closed by peer", "Timed out", "Connection reset")):
            hint = f" ({HANG_HINT})"
        report.wrong(f"world_size {world_size}: rank {exc.rank} raised {exc.exc_type}: {message}{hint}")
        return

    values = {}
    for rank, value in enumerate(results):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            kind = type(value).__name__
            fix = " (call .item() on it)" if kind == "Tensor" else " (return the mean as a float)"
            report.wrong(f"world_size {world_size}: rank {rank} returned a {kind}, not a number{fix}")
        else:
            values[rank] = float(value)
    if len(values) < world_size:
        return

    expected = expected_mean(world_size)
    right = [r for r, v in values.items() if _close(v, expected)]
    if len(right) == world_size:
        report.ok(f"world_size {world_size}: every rank returned {expected:g}")
        return
    if right == [0]:
        report.wrong(f"world_size {world_size}: only rank 0 has the mean {expected:g}; "
                     "dist.reduce leaves it on the destination rank only, all_reduce on every rank")
    all_same = len(set(values.values())) == 1
    for rank, value in values.items():
        if rank not in right and right != [0]:
            report.wrong(f"world_size {world_size}: {_diagnose(rank, value, world_size, all_same)}")


def check_mean_of_squares(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0) -> Report:
    """Run ``fn(rank, world_size)`` on each world size; report, per rank, what is right or wrong."""
    report = Report()
    for world_size in world_sizes:
        _check_world_size(fn, world_size, timeout, report)
    return report
