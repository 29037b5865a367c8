"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median(values: list[float]) -> float:
    """The median of a non-empty list of timings (the mean of the middle two for an even count)."""
    return statistics.median(values)


def median_seconds(run: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``run()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return median(times)
