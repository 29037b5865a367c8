"""Checkers for lesson 08's exercises.

1. ``busbw(algbw, world_size)``: the bus bandwidth nccl-tests prints for an all-reduce (checked on
   world sizes and bandwidths drawn at check time).
2. ``measure_allreduce(rank, world_size, nbytes)``, a worker that times an all-reduce of a
   float32 tensor of ``nbytes`` bytes and returns {"seconds", "algbw_gbs", "busbw_gbs"}; the
   checker runs it on 2 and 3 ranks with ``nbytes`` drawn at check time, records every all-reduce
   the ranks run through torch's profiler (size, type, duration), and checks that one of them was
   that tensor, that the worker's time is that all-reduce's, and that the figures follow from it.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator

from ddp_lib.bench.report import bus_factor
from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name

REL_TOL = 0.01
# The learner's time must lie within the range of its own all-reduces' durations as the profiler
# saw them (one call, or an average of several), give or take this factor for the timer's overhead.
MEASURED_FACTOR = 1.5
KEYS = ("seconds", "algbw_gbs", "busbw_gbs")
_DTYPE_NAMES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16"}


def _factor_mistake(ratio: float, world_size: int) -> str:
    """What a wrong busbw/algbw ratio most likely means."""
    if math.isclose(ratio, 1.0, rel_tol=REL_TOL):
        return f"busbw equals algbw: multiply by 2(N-1)/N ({bus_factor(world_size):g} for N={world_size})"
    if math.isclose(ratio, 2.0, rel_tol=REL_TOL):
        return "busbw is twice algbw: the factor is 2(N-1)/N, not 2 (each rank sends N-1 of its N chunks twice)"
    if math.isclose(ratio, (world_size - 1) / world_size, rel_tol=REL_TOL):
        return "the factor (N-1)/N is only one phase (reduce-scatter); all-reduce also all-gathers: 2(N-1)/N"
    return f"busbw / algbw is {ratio:.3g}, expected 2(N-1)/N = {bus_factor(world_size):g} for N={world_size}"


def check_busbw(busbw: Callable[[float, int], float], cases: int = 4) -> Report:
    """Call the learner's ``busbw(algbw, world_size)`` on ``cases`` world sizes and algbw values
    drawn now (world sizes from 2 to 4096, so only the formula, not a table of them, gets every
    one right); report what is right or wrong."""
    report = Report()
    rng = random.Random()  # fresh each call: nothing to copy from a previous run
    world_sizes = [2, *rng.sample(range(3, 4097), cases - 1)]
    for world_size in world_sizes:
        algbw = round(rng.uniform(0.5, 50), 3)
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


@contextlib.contextmanager
def recording_allreduces() -> Iterator[list[dict]]:
    """In a rank: every gloo all-reduce that ran while the block ran, as {"numel", "dtype",
    "seconds"}, however it was called (``dist.all_reduce``, a name imported from
    ``torch.distributed``, ``distributed_c10d``, a ProcessGroup method). Read from torch's
    profiler, where gloo records each all-reduce (with its tensor's shape and type) from start to
    finish; the list is filled when the block ends."""
    from torch.profiler import ProfilerActivity, profile

    found: list[dict] = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        yield found
    for event in prof.events():
        if event.name == "gloo:all_reduce":
            numel = sum(math.prod(shape) for shape in event.input_shapes)
            found.append({"numel": numel, "dtype": ",".join(event.input_dtypes),
                          "seconds": event.time_range.elapsed_us() / 1e6})


def _run_learner(rank: int, world_size: int, target: str, nbytes: int) -> dict:
    """Runs in each rank: the learner's worker, with every all-reduce it makes recorded (size,
    type and duration), so that its own time can be compared with the all-reduce it timed."""
    worker = load_worker(target)
    with recording_allreduces() as allreduces:
        result = worker(rank, world_size, nbytes)
    return {"result": result, "allreduces": allreduces}


def diagnose(results: list[dict], nbytes: int) -> list[str]:
    """Problems found, one sentence each (empty when all is right)."""
    world_size = len(results)
    problems = []
    for rank, r in enumerate(results):
        out = r["result"]
        if not isinstance(out, dict) or any(k not in out for k in KEYS):
            return [f"rank {rank} returned {type(out).__name__}: return a dict with keys {', '.join(KEYS)}"]
        matching = [a["seconds"] for a in r["allreduces"] if a["dtype"] == "float" and a["numel"] == nbytes // 4]
        if not matching:
            if not r["allreduces"]:
                return [f"rank {rank} ran no all-reduce: time dist.all_reduce of the tensor"]
            seen = ", ".join(sorted({f"{a['numel']} x {_DTYPE_NAMES.get(a['dtype'], a['dtype'])}"
                                     for a in r["allreduces"]}))
            return [f"rank {rank} all-reduced {seen}, never a float32 tensor of {nbytes} bytes "
                    f"({nbytes // 4} elements): make a tensor of nbytes // 4 float32 elements"]
        seconds, algbw, busbw = (float(out[k]) for k in KEYS)
        if not seconds > 0:
            return [f"rank {rank} measured {seconds} seconds: time the all-reduce with time.perf_counter()"]
        low, high = min(matching), max(matching)
        if not low / MEASURED_FACTOR <= seconds <= high * MEASURED_FACTOR:
            return [f"rank {rank} reports {seconds:.3g} s, but its all-reduces of {nbytes} bytes took {low:.3g} to "
                    f"{high:.3g} s: time the all-reduce itself, with time.perf_counter() just before and just after it"]
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


def draw_nbytes(rng: random.Random) -> int:
    """A message size drawn at check time: a whole number of float32s from 256 KiB to 4 MiB."""
    return 4 * rng.randrange(1 << 16, 1 << 20)


def check_bandwidth_worker(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90) -> Report:
    """Run the learner's ``fn(rank, world_size, nbytes)`` on each of ``world_sizes`` ranks, with
    ``nbytes`` drawn now, and report whether each rank all-reduced a float32 tensor of that size,
    timed it, and derived algbw and busbw from its time."""
    report = Report()
    rng = random.Random()
    for world_size in world_sizes:
        nbytes = draw_nbytes(rng)
        results = run_on_ranks(_run_learner, world_size, report, (worker_name(fn), nbytes), timeout=timeout)
        if results is None:
            return report
        problems = diagnose(results, nbytes)
        for problem in problems:
            report.fail(f"world_size {world_size}: {problem}")
        if problems:
            return report
        report.ok(f"world_size {world_size}: every rank timed its all-reduce of a float32 tensor of {nbytes} bytes")
        report.ok(f"world_size {world_size}: algbw = bytes / seconds and busbw = algbw x {bus_factor(world_size):g} "
                  f"(2(N-1)/N) on every rank")
    return report
