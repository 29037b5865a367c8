"""Checker for lesson 00's exercise: a first worker that joins the process group.

The worker ``who_am_i(rank, world_size, name)`` joins the group and returns ``{"rank": rank,
"world_size": world_size, "is_main": rank == 0, "everyone": [every rank's name, in rank order]}``.
Each rank's ``name`` is drawn inside that rank when the checker runs, so no process but that rank
knows it: the list of everyone's names can only come from the ranks talking to each other. The
exercise is to make them talk through the process group, so on more than one rank the checker
also requires a collective that carries data (a barrier carries none), counted however it was
called, whose input held this rank's name; names swapped through files or through the
rendezvous store are refused, with or without a collective beside them. The answer is rebuilt
from plain dicts, lists, strings and numbers inside the rank (a tuple of the names is as good as
the list), so no object of the learner's, one that claims to equal anything, reaches the checker.

    print(check_who_am_i(who_am_i))
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    NOT_CARRYING_DATA,
    Report,
    load_worker,
    run_on_ranks,
    watching_collectives,
    worker_name,
)


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: draws this rank's name, then calls the learner's worker with it,
    counting the collectives it ran that carry data."""
    name = secrets.token_hex(4)  # fresh randomness: no other process can know it
    with watching_collectives() as watched:
        got = load_worker(target)(rank, world_size, name)
    calls, sent = watched.counts, watched.inputs
    got = _plain(got)  # here, where only this rank's name exists: no object of the learner's leaves it
    carried = sum(n for op, n in calls.items() if op not in NOT_CARRYING_DATA)
    # A collective that carries data is not enough (names swapped through the store, then an
    # all_reduce of zeros): this rank's own name must be in what it gave a collective.
    # The collective must span the job: one in a group of this rank alone carries nothing anywhere.
    return {"name": name, "got": got, "carried": carried and sent.carried(name, group_size=world_size)}


def _plain(value: object) -> object:
    """``value`` rebuilt from exact dicts, lists, tuples, strings, numbers and None; anything else
    becomes the text ``<TypeName>``, so an object that claims to equal anything is no answer."""
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool):  # bool cannot be subclassed
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            # The base class's own conversion: a subclass's overrides (its __eq__) are dropped.
            return {int: int.__int__, float: float.__float__, str: str.__str__}[kind](value)
    return f"<{type(value).__name__}>"


def _kind(value: object) -> str:
    """The type's name of a returned value, also for what :func:`_plain` replaced by ``<TypeName>``."""
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return value[1:-1]
    return type(value).__name__


def _is_right(got: object, expected: dict) -> bool:
    """Whether ``got`` is ``expected``; a tuple of the names is as good as the list."""
    if isinstance(got, dict) and isinstance(got.get("everyone"), tuple):
        got = {**got, "everyone": list(got["everyone"])}
    return got == expected


def _expected(rank: int, world_size: int, names: list[str]) -> dict:
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": names}


def _diagnose(rank: int, got: object, expected: dict) -> str:
    """What is wrong in ``got``, rank ``rank``'s answer: the first key or list slot that differs, named."""
    if not isinstance(got, dict):
        return f"rank {rank} returned a {_kind(got)}, expected a dict with keys {list(expected)}"
    missing = [key for key in expected if key not in got]
    extra = [key for key in got if key not in expected]
    if missing or extra:
        return (f"rank {rank}'s dict " + (f"lacks {missing}" if missing else "")
                + (" and " if missing and extra else "") + (f"has keys not asked for {extra}" if extra else "")
                + f"; expected exactly {list(expected)}")
    for key in ("rank", "world_size", "is_main"):
        if got[key] != expected[key]:
            return f"rank {rank} returned {key}={got[key]!r}, expected {expected[key]!r}"
    everyone, names = got["everyone"], expected["everyone"]
    if everyone in ([names[rank]], (names[rank],), names[rank]):
        return f"rank {rank} returned only its own name: it must get the others' names from them"
    if not isinstance(everyone, (list, tuple)):
        return (f"rank {rank} returned everyone as a {_kind(everyone)}; expected a list of the {len(names)} "
                "ranks' names, in rank order")
    if len(everyone) != len(names):
        return f"rank {rank} returned {len(everyone)} names in everyone; expected {len(names)}, one per rank"
    if sorted(map(str, everyone)) == sorted(names):
        return f"rank {rank} has every rank's name but not in rank order: use the list all_gather_object fills"
    slot = next(r for r, (mine, want) in enumerate(zip(everyone, names)) if mine != want)
    return f"rank {rank} returned everyone[{slot}]={everyone[slot]!r}; expected rank {slot}'s name, {names[slot]!r}"


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
                 for rank, run in enumerate(runs) if not _is_right(run["got"], _expected(rank, world_size, names))]
        silent = [rank for rank, run in enumerate(runs) if not run["carried"]]
        if wrong:
            report.fail(f"world_size {world_size}: {wrong[0]}")
        elif world_size > 1 and silent:
            report.fail(f"world_size {world_size}: rank {silent[0]} has the right names but ran no collective over "
                        "all ranks that carried its name; the names must travel through the process group "
                        "(dist.all_gather_object)")
        else:
            report.ok(f"world_size {world_size}: every rank returned its rank, the world size, is_main "
                      "and every rank's name")
    return report
