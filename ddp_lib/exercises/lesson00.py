"""Checker for lesson 00's exercise: ``who_am_i(rank, world_size, name)``, every rank's name in rank order."""

import secrets
from collections.abc import Callable

from ddp_lib.exercises.checking import COLLECTIVES, check_on_ranks, run_counted, worker_name


def diagnose(rank: int, got: object, names: list[str], called: list[str]) -> str | None:
    """What is wrong in rank ``rank``'s answer, the ranks' names being ``names`` (None: nothing), with its fix."""
    expected = {"rank": rank, "world_size": len(names), "is_main": rank == 0, "everyone": names}
    if isinstance(got, dict) and isinstance(got.get("everyone"), tuple):
        got = {**got, "everyone": list(got["everyone"])}  # a tuple of the names is as good as the list
    if got == expected:
        return None
    if not isinstance(got, dict) or set(got) != set(expected):
        shown = sorted(got) if isinstance(got, dict) else f"a {type(got).__name__}"
        return f"rank {rank} returned {shown}; expected a dict with keys {list(expected)}"
    if key := next((key for key in ("rank", "world_size", "is_main") if got[key] != expected[key]), None):
        return f"rank {rank} returned {key}={got[key]!r}, expected {expected[key]!r}"
    everyone = got["everyone"]
    if len(names) > 1 and not called:
        return f"no collective ran, so rank {rank} knows only its own name: use dist.all_gather_object"
    if "gather_object" in called and "all_gather_object" not in called:
        return (f"rank {rank} has no list of names: gather_object gives the list to the destination rank only; "
                "all_gather_object gives it to every rank")
    if everyone is None and "all_gather_object" in called:
        return (f"rank {rank} returned everyone=None: all_gather_object returns None; it fills the list you pass it "
                "in place, so return that list")
    if not isinstance(everyone, list) or len(everyone) != len(names):
        return f"rank {rank} returned everyone={everyone!r}; expected a list of the {len(names)} ranks' names"
    slot = next(r for r, (mine, want) in enumerate(zip(everyone, names)) if mine != want)
    return f"rank {rank} returned everyone[{slot}]={everyone[slot]!r}; expected rank {slot}'s name, {names[slot]!r}"


def check_who_am_i(fn: Callable, world_sizes: tuple[int, ...] = (1, 2, 3), timeout: float = 60.0):
    """A report on ``fn(rank, world_size, name)`` on each world size, names drawn now: one line per world size."""
    names = [secrets.token_hex(4) for _ in range(max(world_sizes))]
    return check_on_ranks(run_counted, world_sizes, lambda runs: next(filter(None, (
        diagnose(rank, run["result"], names[:len(runs)], run["called"]) for rank, run in enumerate(runs))), None),
                          (worker_name(fn), COLLECTIVES, names), timeout=timeout,
                          passed="every rank returned its rank, the world size, is_main and every rank's name")
