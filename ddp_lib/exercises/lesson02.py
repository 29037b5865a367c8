"""Checker for lesson 02's exercise: a worker ``my_share(rank, world_size, n)`` that returns the
items of ``range(n)`` its rank handles, round robin: rank, rank + world_size, rank + 2 * world_size, ...

    print(check_share(my_share))    # what is right or wrong, with n drawn at check time
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

from ddp_lib.exercises.checking import Report, launch_on_ranks


def expected_share(rank: int, world_size: int, n: int) -> list[int]:
    """The items of ``range(n)`` that ``rank`` handles, round robin."""
    return list(range(rank, n, world_size))


def _as_items(value: object) -> list | None:
    if isinstance(value, (list, tuple, range)) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return list(value)
    return None


def _rank_problem(rank: int, world_size: int, n: int, got: object, printed: str) -> str | None:
    want = expected_share(rank, world_size, n)
    where = f"world_size {world_size}, rank {rank}"
    if got is None:
        if printed.strip():
            return (f"{where} returned None and printed {printed.strip().splitlines()[0]!r}: what a worker "
                    "prints never reaches the caller's variables; return the list instead")
        return f"{where} returned None: end the worker with `return` and the list of its items"
    items = _as_items(got)
    if items is None:
        return f"{where} returned {type(got).__name__} {got!r}; expected a list of ints, {want}"
    if items == want:
        return None
    hint = ""
    if rank != 0 and items == expected_share(0, world_size, n):
        hint = " (rank 0's share: does the worker use its rank argument?)"
    elif sorted(items) == want:
        hint = " (the right items in the wrong order)"
    return f"{where} returned {items}, expected {want}{hint}"


def _coverage_problem(world_size: int, n: int, shares: list[list]) -> str | None:
    counts = Counter(x for share in shares for x in share)
    missing = [x for x in range(n) if counts[x] == 0]
    doubled = sorted(x for x, c in counts.items() if c > 1)
    outside = sorted(x for x in counts if not 0 <= x < n)
    parts = []
    if missing:
        parts.append(f"items {missing} are handled by no rank")
    if doubled:
        parts.append(f"items {doubled} by more than one rank")
    if outside:
        parts.append(f"items {outside} are not in range({n})")
    return f"world_size {world_size}: " + "; ".join(parts) if parts else None


def check_share(fn: Callable, n: int | None = None, world_sizes: Sequence[int] = (2, 3),
                seed: int | None = None) -> Report:
    """Run the learner's ``fn(rank, world_size, n)`` on every rank for each world size, with ``n``
    drawn now (unless given), and report what is right or wrong, one line per problem."""
    report = Report()
    n = random.Random(seed).randint(9, 23) if n is None else n
    for world_size in world_sizes:
        run = launch_on_ranks(fn, world_size, report, (n,))
        if run is None:
            if report.lines[-1].startswith("FAIL world_size"):
                if "TypeError" in report.lines[-1]:
                    report.lines[-1] += " (the launcher calls fn(rank, world_size, n))"
                continue
            return report  # refused before starting: the same for every world size
        problems = [p for rank, got in enumerate(run.results)
                    if (p := _rank_problem(rank, world_size, n, got, run.stdout[rank]))]
        shares = [_as_items(got) for got in run.results]
        if all(share is not None for share in shares) and (p := _coverage_problem(world_size, n, shares)):
            problems.append(p)
        for problem in problems:
            report.fail(problem)
        if not problems:
            report.ok(f"world_size {world_size}: every rank returned its share of range({n}), "
                      "and together they cover each item once")
    return report
