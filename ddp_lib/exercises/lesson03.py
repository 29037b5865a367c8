"""Checker for lesson 03's exercise: a worker that picks its device from LOCAL_RANK, wraps the
model in DDP with the right device_ids, and takes one step with its inputs on that device.

The learner's ``fn(rank, world_size)`` must return {"local_rank": int, "device": str, "checksum": float}.
The checker runs it on two layouts, simulated on this machine as torchrun would set LOCAL_RANK,
LOCAL_WORLD_SIZE and GROUP_RANK: 2 nodes x 2 processes (4 ranks) and 1 node x 3 processes. Each
rank starts from fresh randomness of its own, so unless the learner reseeds, its weights and data
differ from every other rank's until DDP makes them agree.

Counting collectives is not enough (a dummy all-reduce counts too), so each rank also watches its
ToyModel (its weights at the forward pass, the rank's own gradient before DDP averages it, its
weights after the step) and keeps what every collective was given. The parent then checks what only
the distributed work gives, however the learner seeded or drew the batch: the weights the model ran
with went through a broadcast from rank 0 and are the same on every rank; each rank's own gradient
went into an all-reduce; each rank's step follows the average of ALL ranks' gradients; and the step
has the same size on both world sizes (an average over a hard-coded count has not).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from ddp_lib.exercises.checking import (
    Report,
    load_worker,
    run_on_ranks,
    watching_collectives,
    worker_name,
)
from ddp_lib.workers.placement import expected_device, simulate_nodes
from ddp_lib.workers.shared import ToyModel, param_checksum

LAYOUTS = ((2, 2), (1, 3))  # (nodes, processes per node)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().reshape(-1) for t in tensors])


def _contains_run(values: torch.Tensor, run: torch.Tensor, scales: tuple[float, ...]) -> bool:
    """Whether ``run / scale``, for one of ``scales``, sits in ``values`` as consecutive elements
    (a parameter's slice of DDP's flat bucket, or a whole tensor given on its own)."""
    for scale in scales:
        wanted = run / scale
        tolerance = 1e-5 * wanted.abs().max().item() + 1e-12
        starts = torch.nonzero((values[: len(values) - len(wanted) + 1] - wanted[0]).abs() <= tolerance).flatten()
        if any(torch.allclose(values[i:i + len(wanted)], wanted, rtol=1e-5, atol=tolerance) for i in starts.tolist()):
            return True
    return False


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
    and kept, and its ToyModel watched."""
    # Fresh randomness of this rank's own: unless the learner reseeds, no rank can know another's
    # batch or weights without communicating.
    torch.manual_seed(int.from_bytes(os.urandom(8), "little"))
    load_worker(target)  # read the learner's file fresh
    with watching_toy_model() as seen, watching_collectives() as watched:
        result = simulate_nodes(rank, world_size, nproc_per_node, target)
    collectives, given = watched.counts, watched.inputs
    watched = None
    if "model" in seen:
        grads = seen["local_grads"]
        watched = {"before": seen["before"], "after": _flat(seen["model"].parameters()),
                   "sizes": [p.numel() for p in seen["model"].parameters()],
                   "checksum": param_checksum(seen["model"]),
                   "local_grad": None if any(g is None for g in grads) else torch.cat(grads)}
    given_to = {op: [values for name, values in given.by_op if name == op] for op in ("broadcast_", "allreduce_")}
    return {"result": result, "collectives": dict(collectives), "watched": watched, "given": given_to}


def _went_through(run: dict, op: str, flat: torch.Tensor, scales: tuple[float, ...]) -> bool:
    """Whether every parameter's part of ``flat`` was given to collective ``op`` on this rank."""
    given = [torch.tensor(values, dtype=torch.float64) for values in run["given"][op] if values]
    parts = flat.split(run["watched"]["sizes"])
    return all(any(_contains_run(values, part, scales) for values in given) for part in parts)


def _step_problems(runs: list[dict]) -> list[str]:
    """What the watched ToyModels and the collectives' inputs say about the step: the same weights
    on every rank, sent from rank 0 by a broadcast; each rank's own gradient given to an all-reduce;
    and a step along the average of all ranks' own gradients."""
    world_size = len(runs)
    for rank, run in enumerate(runs):
        watched = run["watched"]
        if watched is None:
            return [f"rank {rank} never called a ToyModel: build ddp_lib.workers.shared.ToyModel, wrap it in DDP "
                    "and call the DDP model on the batch"]
        if watched["checksum"] != run["result"]["checksum"]:
            return [f"rank {rank} returned checksum {run['result']['checksum']}, but the model it trained has "
                    f"{watched['checksum']}: return param_checksum of that model"]
        if watched["local_grad"] is None:
            return [f"rank {rank} computed no gradient through its model: call backward() on a loss computed "
                    "through the DDP model"]
    start = runs[0]["watched"]["before"]
    for rank, run in enumerate(runs[1:], start=1):
        if not torch.allclose(run["watched"]["before"], start, rtol=0, atol=1e-6):
            return [f"rank {rank} fed its batch to weights that differ from rank 0's: wrap the model in DDP before "
                    "the forward pass (DDP copies rank 0's weights to every rank when it is built)"]
    if not _went_through(runs[0], "broadcast_", start, (1.0,)):
        return ["rank 0's weights never went into a broadcast (the ranks agree only because they made the same "
                "weights): wrap the model in DDP, which broadcasts rank 0's weights when it is built"]
    for rank, run in enumerate(runs):
        if not _went_through(run, "allreduce_", run["watched"]["local_grad"], (1.0, float(world_size))):
            return [f"rank {rank}'s own gradient never went into an all-reduce: call backward() through the DDP "
                    "model, which all-reduces the gradients"]
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
    differ = [rank for rank, result in enumerate(results) if result["checksum"] != results[0]["checksum"]]
    if differ:
        problems.append(f"rank {differ[0]}'s parameters after the step differ from rank 0's (checksum "
                        f"{results[differ[0]]['checksum']} against {results[0]['checksum']}); "
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
        if report.fail_each(f"{layout}", problems):
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
