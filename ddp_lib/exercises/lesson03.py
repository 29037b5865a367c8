"""Checker for lesson 03's exercise: a worker that picks its device from LOCAL_RANK, wraps the
model in DDP with the right device_ids, and takes one step with its inputs on that device.

The learner's ``fn(rank, world_size)`` must return {"local_rank": int, "device": str, "checksum": float}
after one SGD step (lr=0.01) on the loss ``ddp_model(x).sum()`` of a batch ``x = torch.randn(20, 10)``.
The checker runs it on two layouts, simulated on this machine as torchrun would set LOCAL_RANK,
LOCAL_WORLD_SIZE and GROUP_RANK: 2 nodes x 2 processes (4 ranks) and 1 node x 3 processes. Each
rank starts from randomness of its own, so its weights and batch differ from every other rank's
until DDP makes the weights agree. A forward hook on ToyModel (public ``torch.nn`` API) records
each rank's weights at the forward pass, its own gradient and its weights after the step; the
parent computes the step DDP and SGD make from those and compares.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name
from ddp_lib.workers.placement import expected_device, simulate_nodes
from ddp_lib.workers.shared import ToyModel, param_checksum

LAYOUTS = ((2, 2), (1, 3))  # (nodes, processes per node)
LR = 0.01  # the exercise's learning rate
HINTS = ((r"device_ids", "device_ids is for a model on one GPU; with a CPU model pass device_ids=None"),)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().reshape(-1) for t in tensors])


@contextlib.contextmanager
def watching_toy_model() -> Iterator[dict]:
    """In a rank: record, for the first ToyModel that runs a forward pass, its weights then, this
    rank's own gradient (a tensor hook runs before DDP averages it) and the model."""
    seen: dict = {}

    def on_forward(module, args):
        if not isinstance(module, ToyModel) or "model" in seen:
            return
        params = list(module.parameters())
        seen.update(model=module, before=_flat(params), local_grads=[None] * len(params))
        for i, param in enumerate(params):
            def record(grad, i=i):
                seen["local_grads"][i] = grad.detach().double().cpu().reshape(-1)
            param.register_hook(record)

    handle = register_module_forward_pre_hook(on_forward)
    try:
        yield seen
    finally:
        handle.remove()


def _run_learner(rank: int, world_size: int, target: str, nproc_per_node: int) -> dict:
    """Runs in each rank: the learner's worker under a simulated layout, its ToyModel watched."""
    torch.manual_seed(int.from_bytes(os.urandom(8), "little"))  # weights and batch of this rank's own
    load_worker(target)  # read the learner's file fresh
    with watching_toy_model() as seen:
        result = simulate_nodes(rank, world_size, nproc_per_node, target)
    if "model" not in seen:
        return {"result": result, "watched": None}
    grads = seen["local_grads"]
    return {"result": result, "watched": {
        "before": seen["before"], "after": _flat(seen["model"].parameters()), "checksum": param_checksum(seen["model"]),
        "local_grad": None if any(g is None for g in grads) else torch.cat(grads)}}


def _placement_problem(rank: int, result: object, nproc_per_node: int) -> str | None:
    if not isinstance(result, dict) or not {"local_rank", "device", "checksum"} <= set(result):
        return f"rank {rank} returned {result!r}; return a dict with keys 'local_rank', 'device' and 'checksum'"
    local_rank = rank % nproc_per_node
    if result["local_rank"] != local_rank:
        hint = " (that is RANK: read LOCAL_RANK instead)" if result["local_rank"] == rank else ""
        return (f"rank {rank} (node {rank // nproc_per_node}) used local_rank {result['local_rank']}, "
                f"expected {local_rank}{hint}")
    if str(result["device"]) != expected_device(local_rank):
        return (f"rank {rank} used device {result['device']}, expected {expected_device(local_rank)} "
                "(cuda:LOCAL_RANK where that GPU exists, else cpu)")
    return None


def diagnose(runs: list[dict], nproc_per_node: int) -> str | None:
    """The first mistake found in one layout's runs, named with its fix (None: all is right)."""
    for rank, run in enumerate(runs):
        problem = _placement_problem(rank, run["result"], nproc_per_node)
        watched = run["watched"]
        if problem:
            return problem
        if watched is None:
            return (f"rank {rank} never called a ToyModel: build ddp_lib.workers.shared.ToyModel, wrap it in DDP "
                    "and call the DDP model on the batch")
        if watched["checksum"] != run["result"]["checksum"]:
            return (f"rank {rank} returned checksum {run['result']['checksum']}, but the model it trained has "
                    f"{watched['checksum']}: return param_checksum of that model")
        if watched["local_grad"] is None:
            return f"rank {rank} computed no gradient: call backward() on a loss computed through the DDP model"
        if not torch.allclose(watched["before"], runs[0]["watched"]["before"], rtol=0, atol=1e-6):
            return (f"rank {rank} fed its batch to weights that differ from rank 0's: wrap the model in DDP before "
                    "the forward pass (DDP copies rank 0's weights to every rank when it is built)")
    mean_grad = torch.stack([run["watched"]["local_grad"] for run in runs]).mean(0)
    for rank, run in enumerate(runs):
        before, after, own = run["watched"]["before"], run["watched"]["after"], run["watched"]["local_grad"]
        step = after - before
        if torch.allclose(step, -LR * mean_grad, atol=1e-6):
            continue
        if step.norm() == 0:
            return f"rank {rank}'s parameters did not change: take an optimizer step after backward()"
        if torch.allclose(step, -LR * own, atol=1e-6):
            return (f"rank {rank} stepped along its own gradient only: call backward() through the DDP model, "
                    "which averages the gradients over all ranks")
        lr = (-(step @ mean_grad) / (mean_grad @ mean_grad)).item()
        divisor = len(runs) * LR / lr if lr > 0 else 0
        if lr > 0 and torch.allclose(step, -lr * mean_grad, atol=1e-6) and abs(divisor - round(divisor)) < 1e-3 \
                and round(divisor) != len(runs):
            return (f"rank {rank} stepped along the sum of the gradients divided by {round(divisor)}, a constant: "
                    "divide by the world size (DDP does)")
        if lr > 0 and torch.allclose(step, -lr * mean_grad, atol=1e-6):
            return f"rank {rank} stepped with a learning rate of {lr:.3g}: use torch.optim.SGD(..., lr={LR})"
        return (f"rank {rank}'s step is not -{LR} times the mean of all ranks' gradients: wrap ToyModel in DDP, "
                f"call backward() on ddp_model(x).sum(), then one torch.optim.SGD step with lr={LR}")
    return None


def check_device_worker(fn: Callable, timeout: float = 120) -> Report:
    """Run the learner's worker ``fn(rank, world_size)`` on 2 simulated nodes x 2 ranks and on
    1 node x 3 ranks; stops at the first layout that fails."""
    report = Report()
    for nodes, nproc_per_node in LAYOUTS:
        world_size = nodes * nproc_per_node
        layout = f"{nodes} node{'s' if nodes > 1 else ''} x {nproc_per_node} ranks"
        runs = run_on_ranks(_run_learner, world_size, report, (worker_name(fn), nproc_per_node), timeout=timeout,
                            hints=HINTS)
        if runs is None:
            return report
        problem = diagnose(runs, nproc_per_node)
        if problem:
            report.fail(f"{layout}: {problem}")
            return report
        report.ok(f"{layout}: every rank used its LOCAL_RANK's device "
                  f"({', '.join(run['result']['device'] for run in runs)}) and stepped along the average of all "
                  "ranks' gradients to the same parameters")
    return report
