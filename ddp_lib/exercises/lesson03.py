"""Checker for lesson 03's exercise: a worker that picks its device from LOCAL_RANK, wraps the
model in DDP with the right device_ids, and takes one step with its inputs on that device.

The learner's ``fn(rank, world_size)`` must return {"local_rank": int, "device": str, "checksum": float}.
The checker runs it on two layouts, simulated on this machine as torchrun would set LOCAL_RANK,
LOCAL_WORLD_SIZE and GROUP_RANK: 2 nodes x 2 processes (4 ranks) and 1 node x 3 processes. Each
rank starts from fresh randomness of its own, so its weights and data differ from every other
rank's unless DDP makes them agree, and the collectives DDP runs are counted in each rank: its
broadcast of the weights when it is built and its all-reduce of the gradients in backward().

Counting is not enough (a dummy all-reduce counts too), so each rank also watches its ToyModel:
the batch it is fed (it must be drawn from this rank's own randomness, which no other rank holds),
its weights at the forward pass, the rank's own gradient before DDP averages it, and its weights
after the step. The parent then checks that all ranks started from the same weights and that each
rank's step followed the average of ALL ranks' gradients: what only real communication gives;
and that the step has the same size on both world sizes (an average over a hard-coded count has not).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from ddp_lib.exercises.checking import Report, counting_collectives, load_worker, run_on_ranks, worker_name
from ddp_lib.models import ToyModel, param_checksum
from ddp_lib.workers.placement import expected_device, simulate_nodes

LAYOUTS = ((2, 2), (1, 3))  # (nodes, processes per node)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().reshape(-1) for t in tensors])


def _own_batches(seed: int) -> list[torch.Tensor]:
    """The batches torch.randn(20, 10) gives from ``seed``: drawn first, or after ToyModel()."""
    torch.manual_seed(seed)
    first = torch.randn(20, 10)
    torch.manual_seed(seed)
    ToyModel()
    return [first, torch.randn(20, 10)]


@contextlib.contextmanager
def watching_toy_model() -> Iterator[dict]:
    """In a rank: record, for the first ToyModel that runs a forward pass, its input, its weights
    then, this rank's own gradient (a tensor hook runs before DDP averages it) and the model."""
    seen: dict = {}

    def on_forward(module, args):
        if not isinstance(module, ToyModel) or "model" in seen:
            return
        seen.update(model=module, input=args[0].detach().cpu().clone(), before=_flat(module.parameters()),
                    local_grads=[None] * len(list(module.parameters())))
        for i, param in enumerate(module.parameters()):
            def record(grad, i=i):
                grad = grad.detach().double().cpu().reshape(-1)
                previous = seen["local_grads"][i]
                seen["local_grads"][i] = grad if previous is None else previous + grad
            param.register_hook(record)

    handle = register_module_forward_pre_hook(on_forward)
    try:
        yield seen
    finally:
        handle.remove()


def _run_learner(rank: int, world_size: int, target: str, nproc_per_node: int) -> dict:
    """Runs in each rank: the learner's worker under a simulated layout, its collectives counted
    and its ToyModel watched."""
    # Fresh randomness of this rank's own: no other rank holds it, so no rank can know another's
    # batch or weights without communicating.
    seed = int.from_bytes(os.urandom(8), "little")
    own_batches = _own_batches(seed)
    torch.manual_seed(seed)
    load_worker(target)  # read the learner's file fresh
    with watching_toy_model() as seen, counting_collectives() as collectives:
        result = simulate_nodes(rank, world_size, nproc_per_node, target)
    watched = None
    if "model" in seen:
        grads = seen["local_grads"]
        watched = {"own_batch": any(seen["input"].shape == b.shape and torch.equal(seen["input"], b)
                                    for b in own_batches),
                   "before": seen["before"], "after": _flat(seen["model"].parameters()),
                   "checksum": param_checksum(seen["model"]),
                   "local_grad": None if any(g is None for g in grads) else torch.cat(grads)}
    return {"result": result, "collectives": dict(collectives), "watched": watched}


def _step_problems(runs: list[dict]) -> list[str]:
    """What the watched ToyModels say about the step: same start, own batches, and a step along
    the average of all ranks' own gradients."""
    for rank, run in enumerate(runs):
        watched = run["watched"]
        if watched is None:
            return [f"rank {rank} never called a ToyModel: build ddp_lib.models.ToyModel, wrap it in DDP and call "
                    "the DDP model on the batch"]
        if not watched["own_batch"]:
            return [f"rank {rank}'s model was not fed a torch.randn(20, 10) of its own (was the seed reset?): every "
                    "rank must train on its own random batch, drawn without reseeding"]
        if watched["checksum"] != run["result"]["checksum"]:
            return [f"rank {rank} returned checksum {run['result']['checksum']}, but the model it trained has "
                    f"{watched['checksum']}: return param_checksum of that model"]
        if watched["local_grad"] is None:
            return [f"rank {rank} computed no gradient through its model: call backward() on a loss computed "
                    "through the DDP model"]
    start = runs[0]["watched"]["before"]
    if any(not torch.allclose(run["watched"]["before"], start, rtol=0, atol=1e-6) for run in runs):
        return ["the ranks fed their batches to different weights: wrap the model in DDP before the forward "
                "pass (DDP copies rank 0's weights to every rank when it is built)"]
    mean_grad = torch.stack([run["watched"]["local_grad"] for run in runs]).mean(0)
    for rank, run in enumerate(runs):
        step = run["watched"]["after"] - run["watched"]["before"]
        if step.norm() == 0:
            return [f"rank {rank}'s parameters did not change: take an optimizer step after backward()"]
        # Plain SGD moves the weights by -lr times the gradient DDP averaged over all ranks.
        lr = -(step @ mean_grad) / (mean_grad @ mean_grad)
        if lr <= 0 or (step + lr * mean_grad).norm() > 1e-2 * step.norm():
            return [f"rank {rank}'s step does not follow the average of all ranks' gradients: call backward() "
                    "through the DDP model (it averages them), then one plain SGD step"]
        run["learning_rate"] = lr.item()
    return []


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
    return problems or _step_problems(runs)


def check_device_worker(fn: Callable, timeout: float = 120) -> Report:
    """Run the learner's worker ``fn(rank, world_size)`` on 2 simulated nodes x 2 ranks and on
    1 node x 3 ranks, and report what is right or wrong."""
    report = Report()
    learning_rates = {}
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
        # The same step size on every world size: an average over a hard-coded number of ranks is not.
        learning_rates[layout] = runs[0]["learning_rate"]
        first, rate = next(iter(learning_rates.items()))
        if abs(learning_rates[layout] - rate) > 1e-3 * rate:
            report.fail(f"{layout}: the step is {learning_rates[layout] / rate:.3g} times the size it had on {first} "
                        "for the same learning rate: average the gradients over the real world size (DDP does)")
            return report
        report.ok(f"{layout}: every rank used its LOCAL_RANK's device "
                  f"({', '.join(run['result']['device'] for run in runs)}), ran DDP's broadcast and all-reduce, "
                  "and stepped along the average of all ranks' gradients to the same parameters")
    return report
