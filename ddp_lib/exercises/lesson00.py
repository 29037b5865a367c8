"""Checker for lesson 00's exercise: a first worker that joins the process group.

The worker ``who_am_i(rank, world_size, name)`` joins the group and returns ``{"rank": rank,
"world_size": world_size, "is_main": rank == 0, "everyone": [every rank's name, in rank order]}``.
Each rank's ``name`` is drawn inside that rank, so the list of everyone's names can only come
from the ranks talking to each other; on more than one rank the checker also counts the
collectives the worker called, so that "no collective ran" can be said.

    print(check_who_am_i(who_am_i))
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    Report,
    counting_collectives,
    load_worker,
    names_called,
    run_on_ranks,
    worker_name,
)

COLLECTIVES = ("all_gather_object", "gather_object", "broadcast_object_list", "all_gather", "all_reduce", "broadcast")


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: this rank's name, drawn now, and what the learner's worker made of it."""
    name = secrets.token_hex(4)
    with counting_collectives(*COLLECTIVES) as calls:
        got = load_worker(target)(rank, world_size, name)
    if isinstance(got, dict) and isinstance(got.get("everyone"), tuple):
        got["everyone"] = list(got["everyone"])  # a tuple of the names is as good as the list
    return {"name": name, "got": got if isinstance(got, dict) else f"a {type(got).__name__}",
            "called": names_called(calls)}


def _diagnose(rank: int, got: object, expected: dict, called: list[str]) -> str | None:
    """What is wrong in rank ``rank``'s answer (None: nothing), the mistake named with its fix."""
    if got == expected:
        return None
    if not isinstance(got, dict) or set(got) != set(expected):
        return f"rank {rank} returned {got if isinstance(got, str) else sorted(got)}; expected a dict with keys " \
               f"{list(expected)}"
    for key in ("rank", "world_size", "is_main"):
        if got[key] != expected[key]:
            return f"rank {rank} returned {key}={got[key]!r}, expected {expected[key]!r}"
    everyone, names = got["everyone"], expected["everyone"]
    if len(names) > 1 and not called:
        return (f"no collective ran, so rank {rank} knows only its own name: get the others' names from them "
                "with dist.all_gather_object")
    if "gather_object" in called and "all_gather_object" not in called:
        return (f"rank {rank} has no list of names: gather_object gives the list to the destination rank only; "
                "all_gather_object gives it to every rank")
    if not isinstance(everyone, list) or len(everyone) != len(names):
        return f"rank {rank} returned everyone={everyone!r}; expected a list of the {len(names)} ranks' names"
    if sorted(map(str, everyone)) == sorted(names):
        return f"rank {rank} has every rank's name but not in rank order: use the list all_gather_object fills"
    slot = next(r for r, (mine, want) in enumerate(zip(everyone, names)) if mine != want)
    return f"rank {rank} returned everyone[{slot}]={everyone[slot]!r}; expected rank {slot}'s name, {names[slot]!r}"


def check_who_am_i(fn: Callable, world_sizes: tuple[int, ...] = (1, 2, 3), timeout: float = 60.0) -> Report:
    """Run ``fn(rank, world_size, name)`` on each world size in turn; one line per world size."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        runs = run_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
        if runs is None:
            continue
        names = [run["name"] for run in runs]
        expected = [{"rank": r, "world_size": world_size, "is_main": r == 0, "everyone": names}
                    for r in range(world_size)]
        wrong = [p for r, run in enumerate(runs) if (p := _diagnose(r, run["got"], expected[r], run["called"]))]
        if wrong:
            report.fail(f"world_size {world_size}: {wrong[0]}")
        else:
            report.ok(f"world_size {world_size}: every rank returned its rank, the world size, is_main "
                      "and every rank's name")
    return report
