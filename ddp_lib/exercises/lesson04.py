"""Checker for lesson 04's exercise: ``average_gradients(model)`` leaves each .grad's mean over the ranks."""

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import MISSING_WAIT, check_on_ranks, counting_collectives, load_worker, worker_name
from ddp_lib.process_group import process_group
from ddp_lib.workers.gradients import make_mlp

ATOL = 1e-6


def _grads(model) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in model.named_parameters()}


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """In each rank: its own gradients for a batch of its own, and the .grads the learner's function left."""
    with process_group(rank, world_size) as device:
        torch.seed()  # a batch of this rank's own, fresh on every check (make_mlp seeds the generator after)
        x, y = torch.randn(4, 8).to(device), torch.randn(4, 4).to(device)
        model = make_mlp(0).to(device)  # the same weights on every rank, as after DDP's broadcast
        nn.functional.mse_loss(model(x), y).backward()
        own = _grads(model)
        with counting_collectives() as calls:
            load_worker(target)(model)
        torch.distributed.barrier()  # an unwaited all-reduce must not race with the read below
        late = [call["name"] for call in calls if call["async_op"] and not call["waited"]]
        return {"own": own, "called": [call["name"] for call in calls], "late": late, "grads": _grads(model)}


def diagnose(results: list[dict]) -> str | None:
    """The mistake the ranks' gradients show, named with its fix (None: every .grad is the mean)."""
    world_size, called = len(results), list(dict.fromkeys(name for r in results for name in r["called"]))
    mean = {n: sum(r["own"][n] for r in results) / world_size for n in results[0]["own"]}
    wrong = [(r, n) for r in results for n in mean if not _close(r["grads"][n], mean[n])]  # (a rank's results, name)
    if late := next((r["late"][0] for r in results if r["late"]), None):
        return MISSING_WAIT.format(late)
    if not wrong:
        return None
    if len(wrong) == world_size * len(mean) and all(_close(r["grads"][n], r["own"][n]) for r, n in wrong):
        if not called:
            return "the gradients are unchanged and no collective ran: a rank has only its own; all_reduce them"
        return (f"{' and '.join(called)} ran, but every .grad is unchanged: collectives work in place on the "
                "tensor passed, and p.grad / world_size is a new tensor; divide p.grad in place "
                "(p.grad /= world_size), then dist.all_reduce(p.grad)")
    for k in range(1, 9):  # the sum divided by k: world_size * the mean when k is 1
        if k != world_size and all(_close(r["grads"][n], mean[n] * world_size / k) for r, n in wrong):
            return (f"every gradient is {world_size} times the mean: all_reduce sums, so divide by world_size"
                    if k == 1 else f"on {world_size} ranks every gradient is the sum divided by {k}, a constant: "
                    "divide by dist.get_world_size()")
    bad = [rank for rank, r in enumerate(results) if any(r is w for w, _ in wrong)]
    return (f"on rank(s) {bad} these .grads do not hold the mean: {', '.join(dict.fromkeys(n for _, n in wrong))}; "
            "every rank needs it: dist.all_reduce each p.grad in place and divide it by world_size")


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def check_average_gradients(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90):
    """A report on ``fn(model)`` after backward on each world size; stops at the first that fails."""
    return check_on_ranks(_run_learner, world_sizes, diagnose, (worker_name(fn),), stop=True, timeout=timeout,
                          passed=lambda runs: f"on every rank, all {len(runs[0]['grads'])} gradients are the mean "
                          f"over the ranks (within {ATOL:g})")
