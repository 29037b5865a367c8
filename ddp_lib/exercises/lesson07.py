"""Checker for lesson 07's exercise: evaluation that every rank takes part in.

The worker ``evaluate(rank, world_size, metric)`` joins the process group, takes the metric it is
given (each rank its own) and returns the mean over all ranks, the same on every rank, without
hanging.

Each rank draws its own metric inside its own process, from fresh randomness, and returns it beside
the learner's answer: no process, the parent included, holds another rank's metric while the
learner's code runs, so the mean can only come from a collective. Before that code runs, each rank
prints a commitment to its metric: the sha256 of a fresh random 16-byte salt followed by the metric.
Its output goes to a file the other ranks could read, but a hash of a secret salt tells them nothing
of the metric. After that code, the rank returns the metric and the salt, and the parent checks them
against the commitment, so a rank whose metric (or salt) was changed while the learner's code ran is
refused. The collectives that ran are counted through torch's profiler, whatever route called them,
and each must run on a backend that carries data between processes (torch's "fake" test backend
accepts any world size and sends nothing); each rank's metric must be among what it gave one. A
metric is any float64 in [0.01, 0.99) and a rank may give its collectives at most ``MAX_SENT`` values,
so no rank can send every metric it might hold. What the collectives counted and carried is judged
in the parent, not in the rank.

The limits: a worker that sends its metric through a real collective, ignores the result and
takes the others' metrics from elsewhere (files, the store) is not told apart: the collective did
the work, and what the worker then uses of it cannot be seen; code that rewrites its own rank's
output file can commit that rank to another metric of its choosing (it must still send that metric
through a collective); code that reads another
process's memory, or that patches this checker, ``ddp_lib.exercises.checking`` or torch (in a rank,
or in the notebook's process, which imports the learner's module), is not guarded against.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import secrets
import struct
from collections.abc import Callable

from ddp_lib.exercises.checking import (
    REAL_BACKENDS,
    Report,
    launch_on_ranks,
    load_worker,
    numbers_in,
    unpickled,
    watching_collectives,
    worker_name,
)

# The line each rank prints first: the sha256 of a salt and the metric it drew, not the metric.
COMMITMENT_LINE = "lesson 07 check: this rank committed to its metric: sha256 "
# The most values a rank may give its collectives: far more than a mean needs, far fewer than it
# takes to send every metric a rank could hold.
MAX_SENT = 10_000
# c10d operators that can combine the ranks' metrics into a mean.
COMBINING = ("allreduce_", "allreduce_coalesced_", "allgather_", "_allgather_base_", "allgather_into_tensor_coalesced_",
             "reduce_", "reduce_scatter_", "_reduce_scatter_base_", "gather_", "broadcast_", "scatter_", "alltoall_",
             "alltoall_base_", "send", "recv_")
def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """Runs in each rank: draw this rank's metric now, then call the learner's worker on it."""
    # Any float64 in [0.01, 0.99), new on every run: to carry every metric a rank could hold, a
    # collective would need millions of values, and a rank may send at most MAX_SENT.
    metric = 0.01 + 0.98 * secrets.randbits(53) / 2**53
    watch = watching_collectives  # taken before the learner's module is imported: it may rebind names here
    salt = secrets.token_bytes(16)
    # Written out of this process before the learner's code runs, and read by the parent from
    # there: whatever that code later does to this frame's variables, the parent can tell. Only a
    # hash is written: the other ranks can read this output, but not undo the hash without the salt.
    print(f"{COMMITMENT_LINE}{_commitment(salt, metric)}", flush=True)
    fn = load_worker(target)
    with watch() as watched:
        value = fn(rank, world_size, metric)
    sent = watched.inputs.over(world_size)
    if hasattr(value, "detach"):  # a tensor: one element is a number written differently
        value = float(value.item()) if value.numel() == 1 else f"<{type(value).__name__} of shape {list(value.shape)}>"
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy.float32, Fraction: a number too
        value = float(value)
    # What the collectives counted and carried goes back as it is; the parent judges it.
    return {"metric": metric, "salt": salt, "value": value, "counts": dict(watched.counts),
            "sent_values": sent.values, "sent_raw": sent.raw, "backends": list(watched.backends)}


def _carries(values: list[list], raw: list[bytes], metric: float, world_size: int) -> bool:
    """Whether a rank handed its metric (or its share, metric / world_size) to a collective that
    sends it: as a tensor element (float32 rounding allowed: 2**-24 relative) or inside a pickled
    object (as a float, a tensor, a numpy float) or text."""
    wanted = (metric, metric / world_size)
    pickled = [b"G" + struct.pack(">d", w) for w in wanted]  # pickle's BINFLOAT, wherever it sits in the bytes
    if any(p in blob for blob in raw for p in pickled):
        return True
    found = [v for sent in values for v in sent] + [v for blob in raw for v in numbers_in(unpickled(blob))]
    return any(isinstance(v, float) and math.isclose(v, w, rel_tol=1e-7) for v in found for w in wanted)


def _commitment(salt: bytes, metric: float) -> str:
    return hashlib.sha256(salt + repr(metric).encode()).hexdigest()


def _printed_commitment(stdout: str) -> str | None:
    """The commitment a rank printed first (None if its output holds none)."""
    return next((line[len(COMMITMENT_LINE):] for line in stdout.splitlines() if line.startswith(COMMITMENT_LINE)), None)


def _kept_its_metric(result: dict, stdout: str) -> bool:
    """Whether the metric and salt a rank returned are those it committed to before the learner's code ran."""
    metric, salt = result.get("metric"), result.get("salt")
    return (type(metric) is float and type(salt) is bytes and len(salt) == 16
            and _printed_commitment(stdout) == _commitment(salt, metric))


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
        changed = [rank for rank, (r, text) in enumerate(zip(results, run.stdout)) if not _kept_its_metric(r, text)]
        if changed:
            report.fail(f"world_size {world_size}: rank {changed[0]}'s metric is not the one it was given (it was "
                        "changed while evaluate ran); use the metric passed in, and leave the caller's variables alone")
            continue
        metrics = [r["metric"] for r in results]
        want = sum(metrics) / world_size
        where = f"world_size {world_size}, metrics {[round(m, 4) for m in metrics]}"
        lonely = [rank for rank, r in enumerate(results) if not any(r["counts"].get(name) for name in COMBINING)]
        wrong = [(rank, r["value"]) for rank, r in enumerate(results)
                 if isinstance(r["value"], bool) or not isinstance(r["value"], (int, float))
                 or abs(r["value"] - want) > 1e-5]
        flooded = [(rank, n) for rank, r in enumerate(results) if (n := sum(map(len, r["sent_values"]))) > MAX_SENT]
        unsent = [rank for rank, r in enumerate(results)
                  if not _carries(r["sent_values"], r["sent_raw"], r["metric"], world_size)]
        unreal = [(rank, backend) for rank, r in enumerate(results) for backend in r["backends"]
                  if backend not in REAL_BACKENDS][:1]
        if unreal:
            rank, backend = unreal[0]
            report.fail(f"{where}: rank {rank} ran a collective on a {backend!r} process group, which carries "
                        "nothing to the other ranks; use the group the job started with (gloo here)")
        elif lonely:
            report.fail(f"{where}: rank {lonely[0]} ran no collective; a rank knows only its own metric, "
                        "so the mean needs one (all_reduce)")
        elif flooded:
            rank, n = flooded[0]
            report.fail(f"{where}: rank {rank} gave its collectives {n:,} values; the mean of one metric per rank "
                        f"needs a few (at most {MAX_SENT:,} are accepted): send the metric itself")
        elif unsent:
            report.fail(f"{where}: rank {unsent[0]} ran a collective, but its metric {metrics[unsent[0]]} did not "
                        "go into one; the mean must come from the ranks' metrics combined by the collective")
        elif wrong:
            rank, got = wrong[0]
            report.fail(f"{where}: rank {rank} returned {got!r}, expected the mean {want:.4g} on every rank")
        else:
            report.ok(f"{where}: every rank returned the mean {want:.4g}")
    return report
