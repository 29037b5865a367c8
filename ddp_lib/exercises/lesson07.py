"""Checker for lesson 07's exercise: evaluation that every rank takes part in.

The worker ``evaluate(rank, world_size, metric)`` joins the process group, takes the metric it is
given (each rank its own) and returns the mean over all ranks, the same on every rank, without
hanging.

Each rank draws its own metric inside its own process, from fresh randomness, and returns it beside
the learner's answer: no process, the parent included, holds another rank's metric while the
learner's code runs, so the mean can only come from a collective. The collectives that ran are
counted through torch's profiler, whatever route called them, and each must run on a backend that
carries data between processes (torch's "fake" test backend accepts any world size and sends nothing).
"""

from __future__ import annotations

import math
import numbers
import secrets
import struct
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    REAL_BACKENDS,
    CollectiveInputs,
    Report,
    launch_on_ranks,
    load_worker,
    watching_collectives,
    worker_name,
)

# c10d operators that can combine the ranks' metrics into a mean.
# The line each rank prints first, with the metric it drew.
METRIC_LINE = "lesson 07 check: this rank drew the metric "
COMBINING = ("allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_", "allgather_into_tensor_coalesced_",
             "reduce_", "reduce_scatter_", "_reduce_scatter_base_", "gather_", "broadcast_", "scatter_", "alltoall_",
             "alltoall_base_", "send", "recv_")
def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: draw this rank's metric now, then call the learner's worker on it."""
    metric = round(0.01 + secrets.randbelow(99) / 100, 2)  # 0.01 .. 0.99, new on every run
    # Written out of this process before the learner's code runs, and read by the parent from
    # there: whatever that code later does to this frame's variables, the check uses what was drawn.
    print(f"{METRIC_LINE}{metric!r}", flush=True)
    fn = load_worker(target)
    with watching_collectives() as watched:
        value = fn(rank, world_size, metric)
    counts, sent = watched.counts, watched.inputs
    if hasattr(value, "detach"):  # a tensor: one element is a number written differently
        value = float(value.item()) if value.numel() == 1 else f"<{type(value).__name__} of shape {list(value.shape)}>"
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy.float32, Fraction: a number too
        value = float(value)
    return {"metric": metric, "value": value, "collectives": sum(counts[name] for name in COMBINING),
            "sent_metric": _carries(sent.over(world_size), metric, world_size),
            "unreal_backends": [b for b in watched.backends if b not in REAL_BACKENDS]}


def _carries(sent: CollectiveInputs, metric: float, world_size: int) -> bool:
    """Whether this rank handed its metric (or its share, metric / world_size) to a collective that
    sends it: as a tensor element (float16 rounding allowed) or inside a pickled object."""
    wanted = (metric, metric / world_size)
    for values in sent.values:
        if any(isinstance(v, float) and math.isclose(v, w, rel_tol=1e-3) for v in values for w in wanted):
            return True
    pickled = [b"G" + struct.pack(">d", w) for w in wanted]  # pickle's BINFLOAT
    return any(p in raw for raw in sent.raw for p in pickled)


def _drawn_metric(stdout: str) -> float:
    """The metric a rank drew, from the first line it printed."""
    return float(next(line for line in stdout.splitlines() if line.startswith(METRIC_LINE))[len(METRIC_LINE):])


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30) -> Report:
    """Run ``fn(rank, world_size, metric)`` on each world size, each rank with a metric it draws
    itself, with a deadline; check that every rank ran a collective and returned the mean."""
    report = Report()
    target = worker_name(fn)
    for world_size in world_sizes:
        run = launch_on_ranks(_run_learner, world_size, report, (target,), timeout=timeout)
        if run is None:
            continue
        results = run.results
        metrics = [_drawn_metric(text) for text in run.stdout]
        want = sum(metrics) / world_size
        where = f"world_size {world_size}, metrics {metrics}"
        lonely = [rank for rank, r in enumerate(results) if r["collectives"] == 0]
        wrong = [(rank, r["value"]) for rank, r in enumerate(results)
                 if isinstance(r["value"], bool) or not isinstance(r["value"], (int, float))
                 or abs(r["value"] - want) > 1e-5]
        unsent = [rank for rank, r in enumerate(results) if not r["sent_metric"]]
        unreal = [(rank, r["unreal_backends"][0]) for rank, r in enumerate(results) if r["unreal_backends"]]
        if unreal:
            rank, backend = unreal[0]
            report.fail(f"{where}: rank {rank} ran a collective on a {backend!r} process group, which carries "
                        "nothing to the other ranks; use the group the job started with (gloo here)")
        elif lonely:
            report.fail(f"{where}: rank {lonely[0]} ran no collective; a rank knows only its own metric, "
                        "so the mean needs one (all_reduce)")
        elif unsent:
            report.fail(f"{where}: rank {unsent[0]} ran a collective, but its metric {metrics[unsent[0]]} did not "
                        "go into one; the mean must come from the ranks' metrics combined by the collective")
        elif wrong:
            rank, got = wrong[0]
            report.fail(f"{where}: rank {rank} returned {got!r}, expected the mean {want:.4g} on every rank")
        else:
            report.ok(f"{where}: every rank returned the mean {want:.4g}")
    return report
