"""Checker for lesson 02's exercise: ``reassemble(rank, world_size, share)``, the round-robin list rebuilt."""

import random
from collections.abc import Callable, Sequence

from ddp_lib.exercises.checking import COLLECTIVES, check_on_ranks, run_counted, worker_name

HINTS = ((r"TypeError.*positional argument", "the checker calls fn(rank, world_size, share)"),
         (r"doesn't match expected size", "all_gather needs a tensor of the same shape from every rank, and shares "
          "differ in length: pad them to one length, or use all_gather_object"))


def _diagnose(rank: int, got: object, shares: list[list], called: list[str]) -> str | None:
    """Why ``got`` from ``rank`` is not the whole list (None: it is), the mistake named."""
    # Round robin: item i is shares[i % world_size][i // world_size].
    whole = [shares[i % len(shares)][i // len(shares)] for i in range(sum(map(len, shares)))]
    got = got.tolist() if hasattr(got, "tolist") else got  # a tensor: its numbers
    got = got if isinstance(got, list) else f"a {type(got).__name__}"
    if got == whole:
        return None
    if isinstance(got, str):
        return f"rank {rank} returned {got}; return the whole list of {len(whole)} numbers"
    if not called:
        return f"no collective ran, so rank {rank} has only its own share: use dist.all_gather_object"
    if got == [x for share in shares for x in share]:
        return (f"rank {rank} returned the shares one after another, rank by rank; the split is round robin: "
                "item i is shares[i % world_size][i // world_size]")
    if len(got) != len(whole):
        return f"rank {rank} returned {len(got)} items; the whole list has {len(whole)}"
    i = next(i for i, (a, b) in enumerate(zip(got, whole)) if a != b)
    where = f"item {i} is {got[i]}, expected {whole[i]} (item {i // len(shares)} of rank {i % len(shares)}'s share)"
    order = "the right items in the wrong order" if sorted(got) == sorted(whole) else "a wrong list"
    return f"rank {rank} returned {order}: its {where}"


def check_reassemble(fn: Callable, world_sizes: Sequence[int] = (2, 3), timeout: float = 60.0):
    """A report on ``fn(rank, world_size, share)`` on each world size, shares drawn afresh."""
    n = random.choice([n for n in range(9, 30) if n % 2 and n % 3])  # unequal shares on 2 and 3 ranks
    shares = {size: [[random.randrange(1000) for _ in range(rank, n, size)] for rank in range(size)]
              for size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: next(filter(None, (
        _diagnose(rank, run["result"], shares[len(runs)], run["called"]) for rank, run in enumerate(runs))), None),
        lambda size: (worker_name(fn), COLLECTIVES, shares[size]), "every rank returned the whole list in order",
        where=lambda runs: f"world_size {len(runs)}, n {n}", timeout=timeout, hints=HINTS)
