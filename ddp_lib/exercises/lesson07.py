"""Checkers for lesson 07: exercise 2, ``evaluate(rank, world_size, metric)``, the mean on every rank, no hang;
exercise 4, the reading of a shape mismatch on 3 ranks under DETAIL."""

import math
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import COLLECTIVES, Report, as_number, check_on_ranks, run_counted, worker_name


def diagnose(results: list[dict], want: float) -> str | None:
    """The mistake the ranks' answers show, named (None: every rank returned the mean ``want``)."""
    silent = [rank for rank, r in enumerate(results) if not r["called"]]
    wrong = [(rank, value) for rank, value in enumerate(as_number(r["result"]) for r in results)
             if isinstance(value, str) or not math.isclose(value, want, rel_tol=1e-5)]
    if wrong and silent:
        return (f"rank {silent[0]} ran no collective; a rank knows only its own metric, so the mean needs one that "
                "every rank calls (all_reduce)")
    if wrong:
        rank, got = wrong[0]
        return (f"rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected the mean "
                f"{want:.4g} on every rank")
    return None


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30):
    """A report on ``fn(rank, world_size, metric)`` on each world size, with a deadline; one line per world size."""
    metrics = [round(random.uniform(0.01, 0.99), 6) for _ in range(max(world_sizes))]
    mean = {size: sum(metrics[:size]) / size for size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, mean[len(runs)]),
                          (worker_name(fn), COLLECTIVES, metrics), timeout=timeout,
                          passed=lambda runs: f"every rank returned the mean {mean[len(runs)]:.4g}",
                          where=lambda runs: f"world_size {len(runs)}, metrics {metrics[:len(runs)]}")


# Exercise 4, run on 3 ranks under DETAIL (docs/answers.md): every rank raises; rank r all-reduces r + 2 elements,
# as run: rank 0's error names rank 1's shape, the errors of ranks 1 and 2 name rank 0's.
MISMATCH_ON_3 = {0: ([2], [3]), 1: ([3], [2]), 2: ([4], [2])}
READING_FORM = "a dict {rank: (its shape, the shape its error compares it with)}, one pair per rank that raised"


def _shape(value: object) -> list[int] | None:
    """A shape written as a list, a tuple or a ``torch.Size`` (None: not a shape)."""
    try:
        return [int(n) for n in value]
    except (TypeError, ValueError):
        return None


def check_mismatch_reading(reading: object) -> Report:
    """A report on exercise 4's answer, ``{rank: (its shape, the other shape)}``: one line per rank."""
    report = Report()
    if not isinstance(reading, dict) or not reading:
        report.fail(f"write your reading: {READING_FORM}; got {reading!r}")
        return report
    for rank in sorted(set(reading) - set(MISMATCH_ON_3), key=str):
        report.fail(f"rank {rank!r}: the run has ranks 0, 1 and 2 only")
    for rank in sorted(set(MISMATCH_ON_3) - set(reading)):
        report.fail(f"no pair for rank {rank}, yet it raised too: print sorted(e.failures)")
    for rank in sorted(set(MISMATCH_ON_3) & set(reading)):
        want_own, want_other = MISMATCH_ON_3[rank]
        pair = reading[rank]
        shapes = [_shape(value) for value in pair] if isinstance(pair, (tuple, list)) and len(pair) == 2 else None
        if shapes is None or None in shapes:
            report.fail(f"rank {rank}: give a pair of shapes such as ([2], [3]); got {pair!r}")
        elif shapes == [want_own, want_other]:
            report.ok(f"rank {rank}: its {want_own} against {want_other}")
        elif shapes == [want_other, want_own]:
            report.fail(f"rank {rank}: the pair is reversed; put the rank's own shape first")
        elif shapes[0] != want_own:
            report.fail(f"rank {rank}: its own shape is not {shapes[0]}; mismatched_shapes gives rank r a tensor of "
                        "r + 2 elements")
        else:
            report.fail(f"rank {rank}: its error does not compare it with {shapes[1]}; read which rank's TensorShape "
                        f"its message names beside its own (e.failures[{rank}])")
    return report
