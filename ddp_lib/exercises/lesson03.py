"""Checker for lesson 03's exercise: a worker that picks its device from LOCAL_RANK, wraps the
model in DDP with the right device_ids, and takes one step with its inputs on that device.

The learner's ``fn(rank, world_size)`` must return {"local_rank": int, "device": str, "checksum": float}.
The checker runs it on 4 ranks laid out as 2 nodes x 2 processes (simulated on this machine:
LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK are set as torchrun would set them on each node).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name
from ddp_lib.workers.placement import expected_device, simulate_nodes

NODES, NPROC_PER_NODE = 2, 2


def _run_learner(rank: int, world_size: int, target: str):
    """Runs in each rank: the learner's worker under a simulated 2-node layout."""
    # Different weights and data on each rank unless DDP makes them agree: a worker without
    # DDP then fails the checksum test instead of passing by luck.
    torch.manual_seed(1000 + rank)
    load_worker(target)  # read the learner's file fresh
    return simulate_nodes(rank, world_size, NPROC_PER_NODE, target)


def diagnose(results: list) -> list[str]:
    """Problems found in the per-rank results, one sentence each (empty when all is right)."""
    problems = []
    for rank, result in enumerate(results):
        if not isinstance(result, dict) or not {"local_rank", "device", "checksum"} <= set(result):
            return [f"rank {rank} returned {result!r}; return a dict with keys 'local_rank', 'device' and 'checksum'"]
        local_rank = rank % NPROC_PER_NODE
        if result["local_rank"] != local_rank:
            hint = " (that is RANK: read LOCAL_RANK instead)" if result["local_rank"] == rank else ""
            problems.append(f"rank {rank} (node {rank // NPROC_PER_NODE}) used local_rank {result['local_rank']}, "
                            f"expected {local_rank}{hint}")
        if str(result["device"]) != expected_device(local_rank):
            problems.append(f"rank {rank} used device {result['device']}, expected {expected_device(local_rank)} "
                            f"(cuda:LOCAL_RANK where that GPU exists, else cpu)")
    checksums = {r["checksum"] for r in results}
    if len(checksums) > 1:
        problems.append(f"the ranks' parameters differ after the step (checksums {[r['checksum'] for r in results]}); "
                        "wrap the model in DDP and call backward() through it")
    return problems


def check_device_worker(fn: Callable, timeout: float = 120) -> Report:
    """Run the learner's worker ``fn(rank, world_size)`` on 2 simulated nodes x 2 ranks and
    report what is right or wrong."""
    report = Report()
    world_size = NODES * NPROC_PER_NODE
    results = run_on_ranks(_run_learner, world_size, report, (worker_name(fn),), timeout=timeout)
    if results is None:
        if "device_ids" in report.lines[-1] and "cpu" in report.lines[-1].lower():
            report.lines[-1] += " (device_ids is for a model on one GPU; with a CPU model pass device_ids=None)"
        return report
    problems = diagnose(results)
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(f"{NODES} nodes x {NPROC_PER_NODE} ranks: every rank used its LOCAL_RANK's device "
                  f"({', '.join(r['device'] for r in results)})")
        report.ok(f"all {world_size} ranks hold the same parameters after the step")
    return report
