"""Checkers for lesson 08's exercises: ``busbw(algbw, world_size)``, and a measured all-reduce's bandwidth."""

import itertools
import math
import random
from collections.abc import Callable

from ddp_lib.bench.report import bus_factor
from ddp_lib.exercises.checking import Report, as_number, check_on_ranks, run_counted, worker_name

REL_TOL, KEYS = 0.01, ("seconds", "algbw_gbs", "busbw_gbs")
# The time must match one of the worker's all-reduces as the checker timed them (or the mean of several
# in a row), give or take this factor and these seconds (Python's call and the checker's bookkeeping).
MEASURED_FACTOR, MEASURED_SLACK_S = 1.5, 0.002


def _factor_mistake(ratio: float, world_size: int) -> str:
    """What a wrong busbw/algbw ratio most likely means (tight tolerances: for N in the thousands (N-1)/N is near 1)."""
    factor = f"2(N-1)/N ({bus_factor(world_size):g} for N={world_size})"
    if math.isclose(ratio, (world_size - 1) / world_size, rel_tol=1e-6):
        return "the factor (N-1)/N is only one phase (reduce-scatter); all-reduce also all-gathers: 2(N-1)/N"
    if math.isclose(ratio, 1.0, rel_tol=1e-6):
        return f"busbw equals algbw: multiply by {factor}"
    return f"busbw / algbw is {ratio:.3g}, expected {factor}"


def check_busbw(busbw: Callable[[float, int], float], cases: int = 4) -> Report:
    """A report on ``busbw(algbw, world_size)`` for 2 and ``cases - 1`` drawn world sizes; stops at a mistake."""
    report, rng = Report(), random.Random()
    for world_size in [2, *rng.sample(range(3, 4097), cases - 1)]:
        algbw = round(rng.uniform(0.5, 50), 3)
        expected = algbw * bus_factor(world_size)
        try:
            got = as_number(busbw(algbw, world_size))
        except Exception as exc:  # the learner's code: report whatever it raised
            report.fail(f"busbw(algbw, {world_size}) raised {type(exc).__name__}: {exc}")
            return report
        if not isinstance(got, float) or not math.isclose(got, expected, rel_tol=1e-6):
            hint = f"; {_factor_mistake(got / algbw, world_size)}" if isinstance(got, float) and got else ""
            report.fail(f"busbw({algbw}, {world_size}) returned {got}, expected {expected:.6g}{hint}")
            return report
        report.ok(f"busbw(algbw, {world_size}) = algbw x {bus_factor(world_size):g}")
    return report


def diagnose(results: list[dict], nbytes: int) -> str | None:
    """The first mistake in the ranks' results, named with its fix (None: all is right)."""
    for rank, r in enumerate(results):
        out, world_size, calls = r["result"], len(results), r["calls"]
        ours = [c for c in calls if c["numel"] == nbytes // 4 and c["dtype"] == "torch.float32"]
        warm = [c["seconds"] for c in calls[1:] if c in ours]  # the first all-reduce also connects
        if not isinstance(out, dict) or any(k not in out for k in KEYS):
            return f"rank {rank} returned {type(out).__name__}: return a dict with keys {', '.join(KEYS)}"
        if not ours:
            seen = ", ".join(sorted({f"{c['numel']} x {c['dtype']}" for c in calls}))
            said = f"all-reduced {seen}, never" if calls else "ran no all-reduce of"
            return (f"rank {rank} {said} a float32 tensor of {nbytes} bytes: time dist.all_reduce of a tensor of "
                    "nbytes // 4 float32 elements")
        seconds, algbw, busbw = (float(out[k]) for k in KEYS)
        if not seconds > 0:
            return f"rank {rank} measured {seconds} seconds: time the all-reduce with time.perf_counter()"
        if not warm:
            return (f"rank {rank} timed the first all-reduce it ran, which also sets up gloo's connections: run "
                    "one all-reduce first (a warm-up), then time another")
        # Near one all-reduce's time or the mean of a run of them (a loop timed and divided).
        totals = list(itertools.accumulate(warm, initial=0.0))
        means = [(totals[j] - totals[i]) / (j - i) for i in range(len(warm)) for j in range(i + 1, len(warm) + 1)]
        if not any(m / MEASURED_FACTOR - MEASURED_SLACK_S <= seconds <= m * MEASURED_FACTOR + MEASURED_SLACK_S
                   for m in means):
            return (f"rank {rank} reports {seconds:.3g} s, but its all-reduces of {nbytes} bytes took "
                    f"{min(warm):.3g} to {max(warm):.3g} s after the first: time those, not other work")
        if not math.isclose(algbw, expected := nbytes / seconds / 1e9, rel_tol=REL_TOL):
            gib = math.isclose(algbw * 2**30, expected * 1e9, rel_tol=REL_TOL)
            return (f"rank {rank}: that is GiB/s (2**30 bytes); nccl-tests reports GB/s (1e9 bytes)" if gib else
                    f"rank {rank}: algbw should be nbytes / seconds / 1e9 (GB/s) = {expected:.4g}, got {algbw:.4g}")
        if not math.isclose(busbw, algbw * bus_factor(world_size), rel_tol=REL_TOL):
            return f"rank {rank}: {_factor_mistake(busbw / algbw, world_size)}"
    return None


def check_bandwidth_worker(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90) -> Report:
    """A report on ``fn(rank, world_size, nbytes)`` on each world size, 4 to 16 MiB drawn now; stops at a failure."""
    nbytes = {world_size: 4 * random.randrange(1 << 20, 1 << 22) for world_size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, nbytes[len(runs)]),
                          lambda size: (worker_name(fn), ("all_reduce",), [nbytes[size]] * size), stop=True,
                          timeout=timeout, passed=lambda runs: f"every rank timed its all-reduce of a float32 tensor "
                          f"of {nbytes[len(runs)]} bytes; algbw = bytes / seconds and busbw = algbw x "
                          f"{bus_factor(len(runs)):g} (2(N-1)/N)")
