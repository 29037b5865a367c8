"""Checker for lesson 04's exercise: ``average_gradients(model)``, called after backward on every rank
(each with its own batch), must leave in each .grad its mean over the ranks; counts collectives."""

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import MISSING_WAIT, check_on_ranks, counting_collectives, load_worker, worker_name

ATOL = 1e-6


def _grads(model) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in model.named_parameters()}


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """In each rank: its own gradients for a batch of its own, and the .grads the learner's function left."""
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.gradients import make_mlp

    with process_group(rank, world_size) as device:
        torch.seed()  # a batch of this rank's own, fresh on every check (make_mlp seeds the generator after)
        x, y = torch.randn(4, 8).to(device), torch.randn(4, 4).to(device)
        model = make_mlp(0).to(device)  # the same weights on every rank, as after DDP's broadcast
        nn.functional.mse_loss(model(x), y).backward()
        own = _grads(model)
        with counting_collectives() as calls:
            load_worker(target)(model)
        # The checker reads the gradients next: an unwaited all-reduce must not race with that read.
        torch.distributed.barrier()
        late = [call["name"] for call in calls if call["async_op"] and not call["waited"]]
        return {"own": own, "called": [call["name"] for call in calls], "late": late, "grads": _grads(model)}


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def diagnose(results: list[dict]) -> str | None:
    """The mistake the ranks' gradients show, named with its fix (None: every .grad is the mean)."""
    world_size = len(results)
    local = [r["own"] for r in results]
    mean = {n: sum(g[n] for g in local) / world_size for n in local[0]}
    wrong = [(rank, n) for rank, r in enumerate(results) for n in mean if not _close(r["grads"][n], mean[n])]
    if late := next((r["late"][0] for r in results if r["late"]), None):
        return MISSING_WAIT.format(late)
    if not wrong:
        return None
    called = list(dict.fromkeys(name for r in results for name in r["called"]))

    def everywhere(test) -> bool:  # test(the learner's .grad, the mean, this rank's own) for every wrong one
        return all(test(results[rank]["grads"][n], mean[n], local[rank][n]) for rank, n in wrong)
    if everywhere(lambda g, ref, own: g is None):
        return "the gradients are gone (.grad is None): average them in place, do not zero or delete them"
    if len(wrong) == world_size * len(mean) and everywhere(lambda g, ref, own: _close(g, own)):
        if not called:
            return "the gradients are unchanged and no collective ran: a rank has only its own; all_reduce them"
        return (f"{' and '.join(called)} ran, but every .grad is unchanged: collectives work in place on the "
                "tensor passed, and p.grad / world_size is a new tensor; divide p.grad in place "
                "(p.grad /= world_size), then dist.all_reduce(p.grad)")
    if everywhere(lambda g, ref, own: _close(g, ref * world_size)):
        return f"every gradient is {world_size} times the mean: all_reduce sums, so divide by world_size"
    for k in range(1, 9):
        if k != world_size and everywhere(lambda g, ref, own, k=k: _close(g, ref * world_size / k)):
            return (f"on {world_size} ranks every gradient is the sum divided by {k}, a constant: divide by "
                    "dist.get_world_size()")
    bad = sorted({rank for rank, _ in wrong})
    if 0 not in bad and "reduce" in called:
        return (f"rank 0 has the mean but rank(s) {bad} do not: dist.reduce leaves it on rank 0; all_reduce gives it "
                "to every rank")
    return f"these gradients do not hold the mean on rank(s) {bad}: {', '.join(dict.fromkeys(n for _, n in wrong))}"


def check_average_gradients(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90):
    """A report on ``fn(model)`` after backward on each world size; stops at the first that fails."""
    def judge(results: list[dict]) -> tuple[str | None, str]:
        return diagnose(results), (f"on every rank, all {len(results[0]['grads'])} gradients are the mean over the "
                                   f"ranks (within {ATOL:g})")
    return check_on_ranks(_run_learner, world_sizes, judge, (worker_name(fn),), stop=True, timeout=timeout)
