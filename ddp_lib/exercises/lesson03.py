"""Checkers for lesson 03's exercises: ``one_step`` uses LOCAL_RANK's device; ``load_on_device`` uses map_location."""

import os
import pathlib
from collections.abc import Callable

import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from ddp_lib.exercises.checking import Report, check_on_ranks, load_worker, worker_name
from ddp_lib.workers.placement import expected_device, simulate_nodes
from ddp_lib.workers.shared import ToyModel, param_checksum

LAYOUTS = {4: (2, "2 nodes x 2 ranks"), 3: (3, "1 node x 3 ranks")}  # world size: (processes per node, said)
LR = 0.01  # the exercise's learning rate
HINTS = ((r"device_ids", "device_ids is for a model on one GPU; with a CPU model pass device_ids=None"),)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().reshape(-1) for t in tensors])


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """In each rank: the learner's result, and its first ToyModel's weights before, own gradient and weights after."""
    torch.manual_seed(int.from_bytes(os.urandom(8), "little"))  # weights and batch of this rank's own
    load_worker(target)  # read the learner's file fresh
    seen: dict = {}

    def on_forward(module, args):
        if isinstance(module, ToyModel) and "model" not in seen:
            seen.update(model=module, before=_flat(module.parameters()), grads={})
            for i, param in enumerate(module.parameters()):  # p.grad may become the very tensor recorded: a copy
                param.register_hook(lambda grad, i=i: seen["grads"].update({i: grad.detach().clone()}))

    register_module_forward_pre_hook(on_forward)  # for the rest of this rank's process
    result = simulate_nodes(rank, world_size, LAYOUTS[world_size][0], target)
    if "model" not in seen:
        return {"result": result, "watched": None}
    model, grads = seen["model"], seen["grads"]
    local_grad = _flat(grads[i] for i in sorted(grads)) if len(grads) == len(list(model.parameters())) else None
    return {"result": result, "watched": {"before": seen["before"], "after": _flat(model.parameters()),
                                          "checksum": param_checksum(model), "local_grad": local_grad}}


def diagnose(runs: list[dict]) -> str | None:
    """The first mistake found in one layout's runs, named with its fix (None: all is right)."""
    for rank, run in enumerate(runs):
        result, watched, local_rank = run["result"], run["watched"], rank % LAYOUTS[len(runs)][0]
        if not isinstance(result, dict) or not {"local_rank", "device", "checksum"} <= set(result):
            return f"rank {rank} returned {result!r}; return a dict with keys 'local_rank', 'device' and 'checksum'"
        if result["local_rank"] != local_rank:
            hint = " (that is RANK: read LOCAL_RANK instead)" if result["local_rank"] == rank else ""
            return (f"rank {rank} (node {rank // LAYOUTS[len(runs)][0]}) used local_rank {result['local_rank']}, "
                    f"expected {local_rank}{hint}")
        if str(result["device"]) != expected_device(local_rank):
            return f"rank {rank} used device {result['device']}, expected {expected_device(local_rank)}"
        if watched is None:
            return f"rank {rank} never called a ToyModel: wrap ToyModel in DDP and call the DDP model on the batch"
        if watched["checksum"] != run["result"]["checksum"]:
            return (f"rank {rank} returned checksum {run['result']['checksum']}, but the model it trained has "
                    f"{watched['checksum']}: return param_checksum of that model")
        if watched["local_grad"] is None:
            return f"rank {rank} computed no gradient: call backward() on a loss computed through the DDP model"
        if not torch.allclose(watched["before"], runs[0]["watched"]["before"], rtol=0, atol=1e-6):
            return (f"rank {rank} fed its batch to weights that differ from rank 0's: wrap the model in DDP, which "
                    "copies rank 0's weights to every rank, before the forward pass")
    mean_grad = torch.stack([run["watched"]["local_grad"] for run in runs]).mean(0)
    for rank, run in enumerate(runs):
        step = run["watched"]["after"] - run["watched"]["before"]
        if torch.allclose(step, -LR * mean_grad, atol=1e-6):
            continue
        if step.norm() == 0:
            return f"rank {rank}'s parameters did not change: take an optimizer step after backward()"
        if torch.allclose(step, -LR * run["watched"]["local_grad"], atol=1e-6):
            return f"rank {rank} stepped along its own gradient only: call backward() through the DDP model"
        lr = (-(step @ mean_grad) / (mean_grad @ mean_grad)).item()  # the step's length along the mean gradient
        divisor = len(runs) * LR / lr if lr > 0 else 0  # the sum of the gradients divided by a constant?
        if divisor and torch.allclose(step, -lr * mean_grad, atol=1e-6):
            return (f"rank {rank} stepped along the sum of the gradients divided by {round(divisor)}, a constant: "
                    "divide by the world size (DDP does)" if abs(divisor - round(divisor)) < 1e-3 else
                    f"rank {rank} stepped with a learning rate of {lr:.3g}: use torch.optim.SGD(..., lr={LR})")
        return (f"rank {rank}'s step is not -{LR} times the mean of all ranks' gradients: wrap ToyModel in DDP, "
                f"call backward() on ddp_model(x).sum(), then one torch.optim.SGD step with lr={LR}")
    return None


def check_device_worker(fn: Callable, timeout: float = 120):
    """A report on ``fn(rank, world_size)`` on 2 simulated nodes x 2 ranks, then 1 node x 3; stops at a failure."""
    return check_on_ranks(_run_learner, tuple(LAYOUTS), diagnose, (worker_name(fn),), stop=True,
                          where=lambda runs: LAYOUTS[len(runs)][1], timeout=timeout, hints=HINTS,
                          passed=lambda runs: f"every rank used its LOCAL_RANK's device "
                          f"({', '.join(run['result']['device'] for run in runs)}) and stepped along the average "
                          "of all ranks' gradients to the same parameters")


# Exercise 4: a checkpoint saved on cuda:0, loaded onto the rank's own device.
CUDA_CHECKPOINT = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "data" / "saved_on_cuda0.pt"
# cpu, then meta: a second device that every machine has, so a device written into the code shows.
LOAD_DEVICES = (torch.device("cpu"), torch.device("meta"))


def check_load_on_device(fn: Callable, path: str | pathlib.Path = CUDA_CHECKPOINT) -> Report:
    """A report on ``fn(path, device)``: every tensor of a cuda:0 checkpoint must come back on ``device``."""
    report = Report()
    saved = torch.load(path, map_location="cpu")
    for device in LOAD_DEVICES:
        try:
            state = fn(str(path), device)
        except Exception as error:  # the learner's own error, reported in one line
            fix = (": pass map_location=device to torch.load" if "CUDA device" in str(error)
                   else "")
            report.fail(f"loading onto {device} raised {type(error).__name__}: {str(error).splitlines()[0][:120]}{fix}")
            return report
        if not isinstance(state, dict) or set(state) != set(saved):
            report.fail(f"loading onto {device} returned {type(state).__name__}: return the dict torch.load gives, "
                        f"with keys {sorted(saved)}")
            return report
        wrong = sorted({str(tensor.device) for tensor in state.values() if tensor.device != device})
        if wrong:
            report.fail(f"loading onto {device} left tensors on {', '.join(wrong)}: pass map_location=device, "
                        "the function's argument, not a device written in the code")
            return report
        if device.type != "meta" and not all(torch.equal(state[key], saved[key]) for key in saved):
            report.fail(f"loading onto {device} changed the values: return what torch.load gives, unchanged")
            return report
        report.ok(f"every tensor of the cuda:0 checkpoint came back on {device}")
    return report
