"""Checker for lesson 03's exercise: a worker that picks its device from LOCAL_RANK, wraps the
model in DDP with the right device_ids, and takes one step with its inputs on that device.

The learner's ``fn(rank, world_size)`` must return {"local_rank": int, "device": str, "checksum": float}.
The checker runs it on two layouts, simulated on this machine as torchrun would set LOCAL_RANK,
LOCAL_WORLD_SIZE and GROUP_RANK: 2 nodes x 2 processes (4 ranks) and 1 node x 3 processes. Each
rank starts from fresh randomness of its own, so its weights and data differ from every other
rank's unless DDP makes them agree, and the collectives DDP runs are counted in each rank: its
broadcast of the weights when it is built and its all-reduce of the gradients in backward().
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ddp_lib.exercises.checking import Report, counting_collectives, load_worker, run_on_ranks, worker_name
from ddp_lib.workers.placement import expected_device, simulate_nodes

LAYOUTS = ((2, 2), (1, 3))  # (nodes, processes per node)


def _run_learner(rank: int, world_size: int, target: str, nproc_per_node: int) -> dict:
    """Runs in each rank: the learner's worker under a simulated layout, its collectives counted."""
    # Fresh randomness of this rank's own: no seed another rank (or a learner) could repeat.
    torch.manual_seed(int.from_bytes(os.urandom(8), "little"))
    load_worker(target)  # read the learner's file fresh
    with counting_collectives() as collectives:
        result = simulate_nodes(rank, world_size, nproc_per_node, target)
    return {"result": result, "collectives": dict(collectives)}


def diagnose(runs: list[dict], nproc_per_node: int) -> list[str]:
    """Problems found in one layout's per-rank runs, one sentence each (empty when all is right)."""
    problems = []
    results = [run["result"] for run in runs]
    for rank, result in enumerate(results):
        if not isinstance(result, dict) or not {"local_rank", "device", "checksum"} <= set(result):
            return [f"rank {rank} returned {result!r}; return a dict with keys 'local_rank', 'device' and 'checksum'"]
        local_rank = rank % nproc_per_node
        if result["local_rank"] != local_rank:
            hint = " (that is RANK: read LOCAL_RANK instead)" if result["local_rank"] == rank else ""
            problems.append(f"rank {rank} (node {rank // nproc_per_node}) used local_rank {result['local_rank']}, "
                            f"expected {local_rank}{hint}")
        if str(result["device"]) != expected_device(local_rank):
            problems.append(f"rank {rank} used device {result['device']}, expected {expected_device(local_rank)} "
                            f"(cuda:LOCAL_RANK where that GPU exists, else cpu)")
    for rank, run in enumerate(runs):
        counted = run["collectives"]
        if not counted:
            problems.append(f"rank {rank} ran no collective at all: join the process group, wrap the model in DDP "
                            "and call backward() through it")
            break
        if not counted.get("broadcast_"):
            problems.append(f"rank {rank} never broadcast the weights, as DDP does when it is built: wrap the model "
                            "in DDP")
            break
        if not counted.get("allreduce_"):
            problems.append(f"rank {rank} never all-reduced gradients, as DDP does in backward(): call backward() "
                            "on a loss computed through the DDP model")
            break
    checksums = [result["checksum"] for result in results]
    if len(set(checksums)) > 1:
        problems.append(f"the ranks' parameters differ after the step (checksums {checksums}); "
                        "wrap the model in DDP and call backward() through it")
    return problems


def check_device_worker(fn: Callable, timeout: float = 120) -> Report:
    """Run the learner's worker ``fn(rank, world_size)`` on 2 simulated nodes x 2 ranks and on
    1 node x 3 ranks, and report what is right or wrong."""
    report = Report()
    for nodes, nproc_per_node in LAYOUTS:
        world_size = nodes * nproc_per_node
        layout = f"{nodes} node{'s' if nodes > 1 else ''} x {nproc_per_node} ranks"
        runs = run_on_ranks(_run_learner, world_size, report, (worker_name(fn), nproc_per_node), timeout=timeout)
        if runs is None:
            if "device_ids" in report.lines[-1] and "cpu" in report.lines[-1].lower():
                report.lines[-1] += " (device_ids is for a model on one GPU; with a CPU model pass device_ids=None)"
            return report
        problems = diagnose(runs, nproc_per_node)
        for problem in problems:
            report.fail(f"{layout}: {problem}")
        if problems:
            return report
        report.ok(f"{layout}: every rank used its LOCAL_RANK's device "
                  f"({', '.join(run['result']['device'] for run in runs)}), ran DDP's broadcast and all-reduce, "
                  "and holds the same parameters after the step")
    return report
