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

import itertools
import math
import numbers
import random
from collections.abc import Callable

from torch.utils._python_dispatch import TorchDispatchMode

from ddp_lib.bench.report import bus_factor
from ddp_lib.exercises.checking import Report, group_of, load_worker, run_on_ranks, worker_name

REL_TOL = 0.01
# The learner's time must match one of its own all-reduces' durations as the profiler saw them
# (one call, or the mean of several in a row), give or take this factor for the timer's overhead.
MEASURED_FACTOR = 1.5
# ... plus this many seconds: Python's call and the profiler's own bookkeeping around a call, which
# on a busy machine can be a millisecond or two (sizes are drawn large enough that this is small).
MEASURED_SLACK_S = 0.002
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


def _as_number(value: object) -> object:
    """A float for a number however it is written (int, float, numpy scalar, one-element tensor);
    anything else unchanged, to be reported as it is."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if hasattr(value, "numel") and hasattr(value, "item") and value.numel() == 1:
        return float(value.item())
    return value


def check_busbw(busbw: Callable[[float, int], float], cases: int = 4) -> Report:
    """Call the learner's ``busbw(algbw, world_size)`` on ``cases`` world sizes and algbw values
    drawn now (world sizes from 2 to 4096, so only the formula, not a table of them, gets every
    one right); report what is right or wrong."""
    report = Report()
    rng = random.Random()  # fresh each call: nothing to copy from a previous run
    world_sizes = [2, *rng.sample(range(3, 4097), cases - 1)]
    for world_size in world_sizes:
        algbw = round(rng.uniform(0.5, 50), 3)
        try:
            got = _as_number(busbw(algbw, world_size))
        except Exception as exc:  # the learner's code: report whatever it raised
            report.fail(f"busbw(algbw, {world_size}) raised {type(exc).__name__}: {exc}")
            return report
        # Computed only after the call: the learner's function cannot find it in this frame.
        expected = algbw * bus_factor(world_size)
        if not isinstance(got, float) or not math.isclose(got, expected, rel_tol=1e-6):
            hint = f"; {_factor_mistake(got / algbw, world_size)}" if isinstance(got, float) and got else ""
            report.fail(f"busbw({algbw}, {world_size}) returned {got!r}, expected {expected:.6g}{hint}")
        else:
            report.ok(f"busbw(algbw, {world_size}) = algbw x {bus_factor(world_size):g}")
    return report


def run_recording_allreduces(worker: Callable, *args) -> tuple[object, list[dict], list[dict] | None]:
    """In a rank: ``worker(*args)``'s result, every gloo all-reduce that ran meanwhile, as
    {"numel", "dtype", "seconds"}, and every all-reduce call with its group's size, as {"numel",
    "dtype", "group_size"}, however it was called (``dist.all_reduce``, a name imported
    from ``torch.distributed``, ``distributed_c10d``, a ProcessGroup method). Read from torch's
    profiler, where gloo records each all-reduce (with its tensor's shape and type) from start to
    finish. The list is built only after the worker returned, from a method looked up before it
    ran: nothing the worker can reach through its callers' frames holds a record to add to. The
    calls are None when fewer than the all-reduces gloo ran."""
    from torch.profiler import ProfilerActivity, profile

    events_of = profile.events  # looked up now, before the learner's code can replace it
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof, _AllReduceGroups() as groups:
        result = worker(*args)
    calls = _CALLS.pop(id(groups))
    events = events_of(prof)
    allreduces = [{"numel": sum(math.prod(shape) for shape in event.input_shapes),
                   "dtype": ",".join(event.input_dtypes), "seconds": event.time_range.elapsed_us() / 1e6}
                  for event in events if event.name == "gloo:all_reduce"]
    # Each all-reduce gloo ran must be one of the calls whose group was seen (one switched out of
    # torch's dispatcher is not).
    return result, allreduces, calls if len(allreduces) <= len(calls) else None


# The all-reduce calls seen by each _AllReduceGroups in use, by its id: kept off the mode itself,
# which the learner's code can reach.
_CALLS: dict[int, list[dict]] = {}


class _AllReduceGroups(TorchDispatchMode):
    """In a rank: every all-reduce's tensor (elements, type) and the size of the group it ran in,
    however it was called (every route reaches c10d's ``allreduce_`` operator through torch's
    dispatcher), so that the timed tensor's all-reduce is known to span every rank, not a group
    of one (no data exchanged)."""

    def __init__(self) -> None:
        super().__init__()
        _CALLS[id(self)] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # c10d's all-reduce, and the functional collectives' (_functional_collectives.all_reduce)
        if func._schema.name in ("c10d::allreduce_", "_c10d_functional::all_reduce", "_c10d_functional::all_reduce_"):
            tensors = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
            _CALLS[id(self)].append({"numel": sum(t.numel() for t in tensors),
                               "dtype": ",".join(sorted({str(t.dtype) for t in tensors})),
                               "group_size": group_of(args, func._schema).size()})
        return func(*args, **(kwargs or {}))


def _run_learner(rank: int, world_size: int, target: str, nbytes: int) -> dict:
    """Runs in each rank: the learner's worker, with every all-reduce it makes recorded (size,
    type and duration), so that its own time can be compared with the all-reduce it timed."""
    result, allreduces, calls = run_recording_allreduces(load_worker(target), rank, world_size, nbytes)
    return {"result": result, "allreduces": allreduces, "calls": calls}


def _timed_candidates(durations: list[float]) -> list[float]:
    """What a right answer may report: one all-reduce's duration, or the mean of several that ran
    one after another (a loop timed and divided), in the order they ran."""
    totals = list(itertools.accumulate(durations, initial=0.0))
    return [(totals[j] - totals[i]) / (j - i) for i in range(len(durations)) for j in range(i + 1, len(durations) + 1)]


def diagnose(results: list[dict], nbytes: int) -> list[str]:
    """Problems found, one sentence each (empty when all is right)."""
    world_size = len(results)
    problems = []
    for rank, r in enumerate(results):
        out = r["result"]
        if not isinstance(out, dict) or any(k not in out for k in KEYS):
            return [f"rank {rank} returned {type(out).__name__}: return a dict with keys {', '.join(KEYS)}"]
        # Every all-reduce gloo ran must have been seen on its way through torch's dispatcher, where
        # its group is known (one switched out of the dispatcher could run in a group of one).
        if r["calls"] is None:
            return [f"rank {rank} ran all-reduce(s) outside torch's dispatcher, where their group cannot be "
                    "checked: call dist.all_reduce as usual"]
        # The timed tensor's every all-reduce must span all ranks: in a smaller group (one rank
        # alone, say) nothing crosses between ranks, however right its size and its time.
        small = [c["group_size"] for c in r["calls"]
                 if c["numel"] == nbytes // 4 and c["dtype"] == "torch.float32" and c["group_size"] != world_size]
        if small:
            return [f"rank {rank} all-reduced its {nbytes}-byte tensor in a group of {small[0]} rank(s), not over "
                    f"all {world_size}: all-reduce it in the job's process group (the default group)"]
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
        # Near one all-reduce's time (or a run's mean), not merely between the fastest and the
        # slowest: a made-up number must not pass because one all-reduce was made to wait.
        if not any(c / MEASURED_FACTOR - MEASURED_SLACK_S <= seconds <= c * MEASURED_FACTOR + MEASURED_SLACK_S
                   for c in _timed_candidates(matching)):
            low, high = min(matching), max(matching)
            return [f"rank {rank} reports {seconds:.3g} s, but its all-reduces of {nbytes} bytes took {low:.3g} to "
                    f"{high:.3g} s and none of them (nor the mean of a run of them) took that long: time the "
                    "all-reduce itself, with time.perf_counter() just before and just after it"]
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
    """A message size drawn at check time: a whole number of float32s from 4 to 16 MiB, large
    enough that the all-reduce, not the timer's overhead, makes most of the time."""
    return 4 * rng.randrange(1 << 20, 1 << 22)


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
        if report.fail_each(f"world_size {world_size}", problems):
            return report
        report.ok(f"world_size {world_size}: every rank timed its all-reduce of a float32 tensor of {nbytes} bytes")
        report.ok(f"world_size {world_size}: algbw = bytes / seconds and busbw = algbw x {bus_factor(world_size):g} "
                  f"(2(N-1)/N) on every rank")
    return report
