"""Checker for lesson 02's exercise: put a round-robin split back together.

A list of ``n`` numbers is split round robin: rank ``r`` holds the items at positions ``r``,
``r + world_size``, ``r + 2 * world_size``, ... (its *share*), and no other rank holds them. The
learner writes ``reassemble(rank, world_size, share)``, which must return, on every rank, the
whole list in its original order. The checker draws the shares afresh for each run and hands each
rank only its own, in that rank's environment: nothing in a rank's process holds another rank's
numbers, and what the parent checks every answer against (the shares it drew) is out of the ranks'
reach. Each rank's share must also go into a collective that moves data, side by side or at its
places in a padded list (not merely somewhere among many values). The limit: a worker that gives
its share to such a collective, ignores what it returns and takes the others' shares from
elsewhere (the process group's key-value store, files) is not told apart: the collective did the
work, and what the worker then uses of it cannot be seen.

    print(check_reassemble(reassemble))
"""

from __future__ import annotations

import numbers
import os
import random
import secrets
from collections.abc import Callable, Sequence

from ddp_lib.errors import LaunchInputError
from ddp_lib.exercises.checking import (
    NOT_CARRYING_DATA,
    Report,
    load_worker,
    run_on_ranks,
    watching_collectives,
    worker_name,
)

SHARE_ENV = "DDP_LIB_CHECK_SHARE"


def expected_share(rank: int, world_size: int, n: int) -> list[int]:
    """The positions in ``range(n)`` that ``rank`` holds, round robin."""
    return list(range(rank, n, world_size))


def interleave(shares: Sequence[Sequence]) -> list:
    """The whole list from the round-robin shares: item ``i`` is ``shares[i % world_size][i // world_size]``."""
    world_size = len(shares)
    n = sum(len(share) for share in shares)
    return [shares[i % world_size][i // world_size] for i in range(n)]


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: call the learner's worker on this rank's share (given in its environment
    only) while watching the collectives that run, and return what they carried."""
    share = [int(x) for x in os.environ.pop(SHARE_ENV).split(",") if x]
    with watching_collectives() as watched:
        answer = load_worker(target)(rank, world_size, list(share))
    ops, sent = watched.counts, watched.inputs
    if hasattr(answer, "tolist"):  # a tensor: its numbers, not the tensor
        answer = answer.tolist()
    # A collective that moves data is not enough (shares swapped through the store, then an
    # all_reduce of zeros): this rank's share must be in what it gave a collective.
    return {"answer": answer, "collectives": dict(ops), "sent_share": sent.carried(share, group_size=world_size)}


def _as_numbers(value: object) -> list | None:
    if isinstance(value, (list, tuple)) and all(isinstance(x, numbers.Real) and not isinstance(x, bool)
                                                for x in value):
        return list(value)
    return None


def _rank_problem(rank: int, answer: object, shares: list[list], whole: list) -> str | None:
    """Why ``answer`` from ``rank`` is not ``whole``: the usual mistakes, named."""
    if answer is None:
        return (f"rank {rank} returned None: end the worker with `return` and the whole list "
                "(what a worker prints never reaches the caller)")
    got = _as_numbers(answer)
    if got is None:
        return f"rank {rank} returned {type(answer).__name__}; expected a list of {len(whole)} numbers"
    if got == whole:
        return None
    if got == shares[rank]:
        return f"rank {rank} returned only its own share {got}: the other ranks' items are only on those ranks"
    if got == [x for share in shares for x in share]:
        return (f"rank {rank} returned the shares one after another, rank by rank; the split is round robin: "
                "item i is shares[i % world_size][i // world_size]")
    if len(got) != len(whole):
        return f"rank {rank} returned {len(got)} items; the whole list has {len(whole)}"
    i = next(i for i, (a, b) in enumerate(zip(got, whole, strict=True)) if a != b)
    where = f"item {i} is {got[i]}, expected {whole[i]} (item {i // len(shares)} of rank {i % len(shares)}'s share)"
    if sorted(got) == sorted(whole):
        return f"rank {rank} returned the right items in the wrong order: its {where}"
    return f"rank {rank} returned a wrong list: its {where}"


def _check_world_size(target: str, world_size: int, n: int, timeout: float, report: Report) -> None:
    where = f"world_size {world_size}, n {n}"
    shares = [[secrets.randbelow(1000) for _ in expected_share(rank, world_size, n)] for rank in range(world_size)]
    env = [{SHARE_ENV: ",".join(map(str, share))} for share in shares]  # each rank sees its own only
    runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout, env=env)
    if runs is None:
        if "TypeError" in report.lines[-1] and "positional argument" in report.lines[-1]:
            report.lines[-1] += " (the checker calls fn(rank, world_size, share))"
        return
    whole = interleave(shares)
    moved = {op for run in runs for op, count in run["collectives"].items() if count and op not in NOT_CARRYING_DATA}
    unsent = [rank for rank, run in enumerate(runs) if not run["sent_share"]]
    problems = [] if moved else [
        "no rank ran a collective that moves data (all_gather_object, all_gather, all_reduce, ...): "
        "each rank holds only its own share, so the others' items must come through the process group"]
    if moved and unsent and len(runs) > 1:
        problems.append(f"rank {unsent[0]}'s share never went into a collective: each rank holds only its own "
                        "share, so the others' items must come through the process group, not beside it")
    problems += [p for rank, run in enumerate(runs) if (p := _rank_problem(rank, run["answer"], shares, whole))]
    if not report.fail_each(where, problems):
        report.ok(f"{where}: every rank returned the whole list of {n} items in order "
                  f"(collectives: {', '.join(sorted(moved))})")


def draw_n(rng: random.Random) -> int:
    """A list length that no world size from 2 to 4 divides, so that shares differ in length."""
    return rng.choice([n for n in range(9, 30) if n % 2 and n % 3])


def check_reassemble(fn: Callable, world_sizes: Sequence[int] = (2, 3), n: int | None = None,
                     timeout: float = 60.0, seed: int | None = None) -> Report:
    """Run ``fn(rank, world_size, share)`` on every rank for each world size, with shares drawn
    afresh and ``n`` drawn now (or from ``seed``); report, per rank, what is right or wrong."""
    report = Report()
    n = draw_n(random.Random(seed)) if n is None else n
    try:
        target = worker_name(fn)
    except LaunchInputError as exc:
        report.fail(f"the worker cannot be launched: {exc}")
        return report
    for world_size in world_sizes:
        _check_world_size(target, world_size, n, timeout, report)
    return report
