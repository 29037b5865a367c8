"""Checker for lesson 02's exercise: a worker ``my_share(rank, world_size, n)`` that returns the
items of ``range(n)`` its rank handles, round robin: rank, rank + world_size, rank + 2 * world_size, ...

    check_share(my_share)    # prints what is right or wrong; returns True if all is right
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError
from ddp_lib.launch import launch


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


def share_problems(fn: Callable, n: int = 10, world_sizes: Sequence[int] = (2, 3)) -> list[str]:
    """Run ``fn(rank, world_size, n)`` on each world size; return what is wrong, one line per
    problem (an empty list: all right)."""
    problems: list[str] = []
    for world_size in world_sizes:
        try:
            run = launch(fn, world_size, (n,), show_output=False, timeout=60)
        except LaunchInputError as exc:
            return [f"the launcher refused the worker before starting anything: {exc}"]
        except WorkerError as exc:
            problems.append(f"world_size {world_size}: {exc} (the launcher calls fn(rank, world_size, n))")
            continue
        except LaunchTimeout as exc:
            problems.append(f"world_size {world_size}: {exc}")
            continue
        for rank, got in enumerate(run.results):
            problem = _rank_problem(rank, world_size, n, got, run.stdout[rank])
            if problem:
                problems.append(problem)
        shares = [_as_items(got) for got in run.results]
        if all(share is not None for share in shares):
            problem = _coverage_problem(world_size, n, shares)
            if problem:
                problems.append(problem)
    return problems


def check_share(fn: Callable, n: int = 10, world_sizes: Sequence[int] = (2, 3)) -> bool:
    """Run the learner's worker on every rank for each world size, print what is right or
    wrong, and return True when every rank returned exactly its share."""
    problems = share_problems(fn, n, world_sizes)
    name = getattr(fn, "__name__", repr(fn))
    sizes = " and ".join(str(w) for w in world_sizes)
    if not problems:
        print(f"✓ {name}: every rank returned its share of range({n}) for world_size {sizes}, "
              "and together they cover each item once")
        return True
    print(f"✗ {name}: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    for problem in problems:
        print(f"  - {problem}")
    return False
