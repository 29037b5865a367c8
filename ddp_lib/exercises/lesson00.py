"""Checker for lesson 00's exercise: a first worker that joins the process group.

The worker ``who_am_i(rank, world_size, name)`` joins the group and returns ``{"rank": rank,
"world_size": world_size, "is_main": rank == 0, "everyone": [every rank's name, in rank order]}``.
Each rank's ``name`` is drawn inside that rank when the checker runs, so no process but that rank
knows it: the list of everyone's names can only come from the ranks talking to each other. The
exercise is to make them talk through the process group, so on more than one rank the checker
also requires a collective that carries data (a barrier carries none), counted however it was
called, whose input held this rank's name; names swapped through files or through the
rendezvous store are refused, with or without a collective beside them.

    print(check_who_am_i(who_am_i))
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    NOT_CARRYING_DATA,
    CollectiveInputs,
    Report,
    counting_collectives,
    load_worker,
    run_on_ranks,
    worker_name,
)


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: draws this rank's name, then calls the learner's worker with it,
    counting the collectives it ran that carry data."""
    name = secrets.token_hex(4)  # fresh randomness: no other process can know it
    with counting_collectives() as calls, CollectiveInputs() as sent:
        got = load_worker(target)(rank, world_size, name)
    carried = sum(n for op, n in calls.items() if op not in NOT_CARRYING_DATA)
    # A collective that carries data is not enough (names swapped through the store, then an
    # all_reduce of zeros): this rank's own name must be in what it gave a collective.
    return {"name": name, "got": got, "carried": carried and sent.carried(name)}


def _expected(rank: int, world_size: int, names: list[str]) -> dict:
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": names}


def _diagnose(rank: int, got: object, expected: dict) -> str:
    if not isinstance(got, dict):
        return f"rank {rank} returned a {type(got).__name__}, expected a dict with keys {list(expected)}"
    wrong_keys = sorted(set(got) ^ set(expected))
    if wrong_keys:
        return f"rank {rank} returned keys {sorted(got)}, expected {list(expected)}"
    for key in ("rank", "world_size", "is_main"):
        if got[key] != expected[key]:
            return f"rank {rank} returned {key}={got[key]!r}, expected {expected[key]!r}"
    everyone = got["everyone"]
    names = expected["everyone"]
    if isinstance(everyone, (list, tuple)) and sorted(map(str, everyone)) == sorted(names):
        return f"rank {rank} has every rank's name but not in rank order: use the list all_gather_object fills"
    if everyone in ([names[rank]], names[rank]):
        return f"rank {rank} returned only its own name: it must get the others' names from them"
    return (f"rank {rank} returned everyone={everyone!r}, expected every rank's name in rank order "
            f"({names!r})")


def check_who_am_i(fn: Callable, world_sizes: tuple[int, ...] = (1, 2, 3), timeout: float = 60.0) -> Report:
    """Run ``fn(rank, world_size, name)`` on each world size in turn and compare every rank's
    result with what it should be."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
        if runs is None:
            continue
        names = [run["name"] for run in runs]
        wrong = [_diagnose(rank, run["got"], _expected(rank, world_size, names))
                 for rank, run in enumerate(runs) if run["got"] != _expected(rank, world_size, names)]
        silent = [rank for rank, run in enumerate(runs) if not run["carried"]]
        if wrong:
            report.fail(f"world_size {world_size}: {wrong[0]}")
        elif world_size > 1 and silent:
            report.fail(f"world_size {world_size}: rank {silent[0]} has the right names but ran no collective that "
                        "carried its name; the names must travel through the process group (dist.all_gather_object)")
        else:
            report.ok(f"world_size {world_size}: every rank returned its rank, the world size, is_main "
                      "and every rank's name")
    return report
