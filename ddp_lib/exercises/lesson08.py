"""Checkers for lesson 08's exercises.

1. ``busbw(algbw, world_size)``: the bus bandwidth nccl-tests prints for an all-reduce.
2. ``measure_allreduce(rank, world_size, nbytes)``, a worker that times ``dist.all_reduce`` of a
   float32 tensor of ``nbytes`` bytes and returns {"seconds", "algbw_gbs", "busbw_gbs"}; the
   checker runs it on every rank and checks that the figures follow from the time measured.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

from ddp_lib.bench.report import bus_factor
from ddp_lib.errors import LaunchTimeout, WorkerError
from ddp_lib.launch import spawn

REL_TOL = 0.01
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


def check_busbw(busbw: Callable[[float, int], float]) -> bool:
    """Call the learner's ``busbw(algbw, world_size)`` for several world sizes; print what is
    right or wrong and return True when every answer is right."""
    for world_size in (2, 4, 8):
        got = busbw(10.0, world_size)
        expected = 10.0 * bus_factor(world_size)
        if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=1e-6):
            print(f"Not yet: busbw(10.0, {world_size}) returned {got!r}, expected {expected:g}.")
            if isinstance(got, (int, float)) and got:
                print(f"- {_factor_mistake(got / 10.0, world_size)}")
            return False
    print("Correct: busbw = algbw x 2(N-1)/N for 2, 4 and 8 ranks (1, 1.5 and 1.75 times algbw).")
    return True


def _run_learner(rank: int, world_size: int, module: str, name: str, nbytes: int) -> dict:
    import torch.distributed as dist

    importlib.invalidate_caches()
    worker = getattr(importlib.import_module(module), name)
    calls = [0]
    real = dist.all_reduce

    def counting(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)
    dist.all_reduce = counting  # to tell the learner whether an all-reduce ran at all
    try:
        result = worker(rank, world_size, nbytes)
    finally:
        dist.all_reduce = real
    return {"result": result, "calls": calls[0]}


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


def check_bandwidth_worker(module: str, name: str = "measure_allreduce", world_size: int = 4,
                           nbytes: int = 1 << 20, timeout: float = 90) -> bool:
    """Run the learner's ``module.name(rank, world_size, nbytes)`` on ``world_size`` ranks; print
    what is right or wrong and return True when every rank's figures follow from its time."""
    try:
        results = spawn(_run_learner, world_size, (module, name, nbytes), backend="gloo", timeout=timeout,
                        show_output=False)
    except WorkerError as e:
        print(f"Not yet: {e}")
        return False
    except LaunchTimeout:
        print(f"Not yet: the ranks hung for {timeout:g} s; does every rank call the same collectives?")
        return False
    problems = diagnose(results, nbytes)
    if problems:
        print("Not yet:")
        for problem in problems:
            print(f"- {problem}")
        return False
    print(f"Correct: on all {world_size} ranks, algbw = bytes / seconds and busbw = algbw x "
          f"{bus_factor(world_size):g} (2(N-1)/N for N={world_size}).")
    return True
