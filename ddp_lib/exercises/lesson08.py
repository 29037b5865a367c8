"""Checkers for lesson 08's exercises.

1. ``busbw(algbw, world_size)``: the bus bandwidth nccl-tests prints for an all-reduce (checked on
   values drawn at check time).
2. ``measure_allreduce(rank, world_size, nbytes)``, a worker that times ``dist.all_reduce`` of a
   float32 tensor of ``nbytes`` bytes and returns {"seconds", "algbw_gbs", "busbw_gbs"}; the
   checker runs it on every rank, times the worker's all-reduces itself, checks that the worker's time
   is of that order, and that the figures follow from it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from ddp_lib.bench.report import bus_factor
from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name

REL_TOL = 0.01
# The learner's time must lie within the range of its own all-reduces' durations as the checker
# timed them (one call, or an average of several), give or take this factor for the timer's overhead.
MEASURED_FACTOR = 1.5
KEYS = ("seconds", "algbw_gbs", "busbw_gbs")


def _factor_mistake(ratio: float, world_size: int) -> str:
    """What a wrong busbw/algbw ratio most likely means."""
    if math.isclose(ratio, 1.0, rel_tol=REL_TOL):
        return f"busbw equals algbw: multiply by 2(N-1)/N ({bus_factor(world_size):g} for N={world_size})"
    if math.isclose(ratio, 2.0, rel_tol=REL_TOL):
        return "busbw is twice algbw: the factor is 2(N-1)/N, not 2 (each rank sends N-1 of its N chunks twice)"
    if math.isclose(ratio, (world_size - 1) / world_size, rel_tol=REL_TOL):
        return "the factor (N-1)/N is only one phase (reduce-scatter); all-reduce also all-gathers: 2(N-1)/N"
    return f"busbw / algbw is {ratio:.3g}, expected 2(N-1)/N = {bus_factor(world_size):g} for N={world_size}"


def check_busbw(busbw: Callable[[float, int], float]) -> Report:
    """Call the learner's ``busbw(algbw, world_size)`` for several world sizes and algbw values
    drawn now; report what is right or wrong."""
    report = Report()
    rng = random.Random()
    for world_size in (2, 4, 8):
        algbw = round(rng.uniform(0.5, 50), 2)
        expected = algbw * bus_factor(world_size)
        try:
            got = busbw(algbw, world_size)
        except Exception as exc:  # the learner's code: report whatever it raised
            report.fail(f"busbw(algbw, {world_size}) raised {type(exc).__name__}: {exc}")
            return report
        if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=1e-6):
            hint = f"; {_factor_mistake(got / algbw, world_size)}" if isinstance(got, (int, float)) and got else ""
            report.fail(f"busbw({algbw}, {world_size}) returned {got!r}, expected {expected:.6g}{hint}")
        else:
            report.ok(f"busbw(algbw, {world_size}) = algbw x {bus_factor(world_size):g}")
    return report


def _run_learner(rank: int, world_size: int, target: str, nbytes: int) -> dict:
    """Runs in each rank: the learner's worker, with every ``dist.all_reduce`` it makes counted and
    timed by the checker, so its own time can be compared with what the checker saw."""
    import time

    import torch.distributed as dist

    worker = load_worker(target)
    real, durations = dist.all_reduce, []

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            durations.append(time.perf_counter() - start)
    dist.all_reduce = timed
    try:
        result = worker(rank, world_size, nbytes)
    finally:
        dist.all_reduce = real
    return {"result": result, "calls": len(durations), "durations": durations}


def diagnose(results: list[dict], nbytes: int) -> list[str]:
    """Problems found, one sentence each (empty when all is right)."""
    world_size = len(results)
    problems = []
    for rank, r in enumerate(results):
        out = r["result"]
        if not isinstance(out, dict) or any(k not in out for k in KEYS):
            return [f"rank {rank} returned {type(out).__name__}: return a dict with keys {', '.join(KEYS)}"]
        if r["calls"] == 0:
            return [f"rank {rank} never called dist.all_reduce"]
        seconds, algbw, busbw = (float(out[k]) for k in KEYS)
        if not seconds > 0:
            return [f"rank {rank} measured {seconds} seconds: time the all-reduce with time.perf_counter()"]
        low, high = min(r["durations"]), max(r["durations"])
        if not low / MEASURED_FACTOR <= seconds <= high * MEASURED_FACTOR:
            return [f"rank {rank} reports {seconds:.3g} s, but its all-reduces took {low:.3g} to {high:.3g} s when "
                    "the checker timed them: time the all-reduce itself, with time.perf_counter() just before "
                    "and just after it"]
        expected = nbytes / seconds / 1e9
        if not math.isclose(algbw, expected, rel_tol=REL_TOL):
            ratio = algbw / expected
            if math.isclose(ratio, 1e3, rel_tol=REL_TOL) or math.isclose(ratio, 1e9, rel_tol=REL_TOL):
                hint = "GB/s means 1e9 bytes per second: divide bytes per second by 1e9"
            elif math.isclose(ratio, 1e9 / 2**30, rel_tol=REL_TOL):
                hint = "that is GiB/s (2**30); nccl-tests reports GB/s (1e9 bytes)"
            elif math.isclose(ratio, 4.0, rel_tol=REL_TOL):
                hint = "nbytes is already in bytes: do not multiply by the 4 bytes of a float32 again"
            else:
                hint = f"algbw should be nbytes / seconds / 1e9 = {expected:.4g}, got {algbw:.4g}"
            problems.append(f"rank {rank}: {hint}")
            break
        if not math.isclose(busbw, algbw * bus_factor(world_size), rel_tol=REL_TOL):
            problems.append(f"rank {rank}: {_factor_mistake(busbw / algbw, world_size)}")
            break
    return problems


def check_bandwidth_worker(fn: Callable, world_size: int = 4, nbytes: int = 1 << 20, timeout: float = 90) -> Report:
    """Run the learner's ``fn(rank, world_size, nbytes)`` on ``world_size`` ranks and report
    whether each rank's time is a real measurement and its figures follow from it."""
    report = Report()
    results = run_on_ranks(_run_learner, world_size, report, (worker_name(fn), nbytes), timeout=timeout)
    if results is None:
        return report
    problems = diagnose(results, nbytes)
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(f"world_size {world_size}: every rank timed a real all-reduce of {nbytes} bytes")
        report.ok(f"algbw = bytes / seconds and busbw = algbw x {bus_factor(world_size):g} "
                  f"(2(N-1)/N for N={world_size}) on every rank")
    return report
