"""Checker for lesson 00's exercise: a first worker that reports who it is.

The worker ``fn(rank, world_size)`` must return ``{"rank": rank, "world_size": world_size,
"is_main": rank == 0}``. The checker runs it on 1, 2 and 3 ranks and says what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from ddp_lib.exercises.checking import Report, run_on_ranks


def expected(rank: int, world_size: int) -> dict:
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0}


def check_who_am_i(fn: Callable, world_sizes: tuple[int, ...] = (1, 2, 3)) -> Report:
    """Run ``fn`` on each world size in turn and compare every rank's result with what it should be."""
    report = Report()
    for world_size in world_sizes:
        results = run_on_ranks(fn, world_size, report)
        if results is None:
            continue
        wrong = [(rank, got) for rank, got in enumerate(results) if got != expected(rank, world_size)]
        if wrong:
            rank, got = wrong[0]
            report.fail(f"world_size {world_size}: rank {rank} returned {got!r}, "
                        f"expected {expected(rank, world_size)!r}")
        else:
            report.ok(f"world_size {world_size}: every rank returned its rank, the world size and is_main")
    return report
