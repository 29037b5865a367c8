"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median(values: list[float]) -> float:
    """The median of a non-empty list of timings (the mean of the middle two for an even count)."""
    return statistics.median(values)


def quartiles(values: list[float]) -> tuple[float, float]:
    """The first and third quartiles of a list of timings: the spread a median is reported with
    (half the repeats fall between them). A single value is its own spread."""
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def time_in_turn(runs: dict[str, Callable[[], object]], repeats: int,
                 cold: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Wall seconds of each of ``runs`` (name -> call) in ``repeats`` rounds, one call of each
    in turn per round, after one untimed warm-up round (which skips the names in ``cold``:
    nothing to warm). Taken in turn, the sides share whatever else the machine is doing."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(repeats + 1):
        for name, run in runs.items():
            if not repeat and name in cold:
                continue
            start = time.perf_counter()
            run()
            if repeat:
                times[name].append(time.perf_counter() - start)
    return times


def compare(first: tuple[float, float, float], second: tuple[float, float, float]) -> str:
    """Two (median, first quartile, third quartile) spreads: "lower" or "higher" when the first's
    middle half lies wholly below or above the second's; "undecided" when the middle halves
    overlap, so the noise is as large as the difference."""
    if first[2] < second[1]:
        return "lower"
    if first[1] > second[2]:
        return "higher"
    return "undecided"
