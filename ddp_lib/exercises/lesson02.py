"""Checker for lesson 02's exercise: put a round-robin split back together.

A list of ``n`` numbers is split round robin: rank ``r`` holds the items at positions ``r``,
``r + world_size``, ... (its *share*). The learner writes ``reassemble(rank, world_size, share)``,
which must return, on every rank, the whole list in its original order. The checker draws the
shares afresh for each run, with an ``n`` that neither 2 nor 3 divides (so shares differ in
length), gives each rank its own, and counts the collectives the worker called.

    print(check_reassemble(reassemble))
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence

from ddp_lib.exercises.checking import (
    Report,
    counting_collectives,
    load_worker,
    names_called,
    run_on_ranks,
    worker_name,
)

COLLECTIVES = ("all_gather_object", "all_gather", "gather_object", "broadcast_object_list", "all_reduce",
               "broadcast", "all_to_all")
SHARE_ENV = "DDP_LIB_CHECK_SHARE"
HINTS = (
    (r"TypeError.*positional argument", "the checker calls fn(rank, world_size, share)"),
    (r"doesn't match expected size", "all_gather needs a tensor of the same shape from every rank, and shares "
                                     "differ in length: pad them to one length, or use all_gather_object"),
)


def interleave(shares: Sequence[Sequence]) -> list:
    """The whole list from the round-robin shares: item ``i`` is ``shares[i % world_size][i // world_size]``."""
    world_size = len(shares)
    n = sum(len(share) for share in shares)
    return [shares[i % world_size][i // world_size] for i in range(n)]


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: the learner's answer for this rank's share, and its collectives."""
    share = [int(x) for x in os.environ.pop(SHARE_ENV).split(",") if x]
    with counting_collectives(*COLLECTIVES) as calls:
        answer = load_worker(target)(rank, world_size, list(share))
    if hasattr(answer, "tolist"):  # a tensor: its numbers
        answer = answer.tolist()
    return {"answer": answer if isinstance(answer, list) else f"a {type(answer).__name__}",
            "called": names_called(calls)}


def _diagnose(rank: int, got: object, shares: list[list], called: list[str]) -> str | None:
    """Why ``got`` from ``rank`` is not the whole list (None: it is), the mistake named."""
    whole = interleave(shares)
    if got == whole:
        return None
    if got == "a NoneType":
        return (f"rank {rank} returned None: end the worker with `return` and the whole list "
                "(what a worker prints never reaches the caller)")
    if isinstance(got, str):
        return f"rank {rank} returned {got}; expected a list of {len(whole)} numbers"
    if not called:
        return (f"no collective ran, so rank {rank} has only its own share: get the others' with "
                "dist.all_gather_object")
    if got == [x for share in shares for x in share]:
        return (f"rank {rank} returned the shares one after another, rank by rank; the split is round robin: "
                "item i is shares[i % world_size][i // world_size]")
    if len(got) != len(whole):
        return f"rank {rank} returned {len(got)} items; the whole list has {len(whole)}"
    i = next(i for i, (a, b) in enumerate(zip(got, whole)) if a != b)
    where = f"item {i} is {got[i]}, expected {whole[i]} (item {i // len(shares)} of rank {i % len(shares)}'s share)"
    order = "the right items in the wrong order" if sorted(got) == sorted(whole) else "a wrong list"
    return f"rank {rank} returned {order}: its {where}"


def check_reassemble(fn: Callable, world_sizes: Sequence[int] = (2, 3), timeout: float = 60.0,
                     seed: int | None = None) -> Report:
    """Run ``fn(rank, world_size, share)`` on every rank for each world size, with shares drawn
    afresh (from ``seed`` if given); one line per world size."""
    report = Report()
    rng = random.Random(seed)
    n = rng.choice([n for n in range(9, 30) if n % 2 and n % 3])
    target = worker_name(fn)
    for world_size in world_sizes:
        shares = [[rng.randrange(1000) for _ in range(rank, n, world_size)] for rank in range(world_size)]
        # Each rank's own share, in its environment (a launch's args are the same for every rank).
        runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout, hints=HINTS,
                            env=[{SHARE_ENV: ",".join(map(str, share))} for share in shares])
        if runs is None:
            continue
        problems = [p for r, run in enumerate(runs) if (p := _diagnose(r, run["answer"], shares, run["called"]))]
        if problems:
            report.fail(f"world_size {world_size}, n {n}: {problems[0]}")
        else:
            report.ok(f"world_size {world_size}, n {n}: every rank returned the whole list in order")
    return report
