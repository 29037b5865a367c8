"""Checker for lesson 04's exercise: ``average_gradients(model)``, called after backward on every
rank, must leave in each .grad the mean of that gradient over all ranks (what DDP does).

The checker runs one backward on each rank's own data, calls the learner's function, and
compares every parameter's .grad with what torch's DDP produces from the same weights and data.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import Report, load_worker, run_on_ranks, worker_name

ATOL = 1e-6


def _run_learner(rank: int, world_size: int, target: str, seed: int = 0) -> dict:
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.gradients import make_mlp, rank_batch, wrap_ddp

    average_gradients = load_worker(target)
    with process_group(rank, world_size) as device:
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, 4, seed))
        reference = wrap_ddp(make_mlp(seed).to(device), device)
        nn.functional.mse_loss(reference(x), y).backward()
        model = make_mlp(seed).to(device)  # same weights on every rank, as after DDP's broadcast
        nn.functional.mse_loss(model(x), y).backward()
        local = {n: p.grad.detach().clone().cpu() for n, p in model.named_parameters()}
        average_gradients(model)
        return {
            "learner": {n: None if p.grad is None else p.grad.detach().clone().cpu()
                        for n, p in model.named_parameters()},
            "reference": {n: p.grad.detach().clone().cpu() for n, p in reference.module.named_parameters()},
            "local": local,
        }


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def diagnose(results: list[dict]) -> list[str]:
    """Problems found, one sentence each, most telling first (empty when all is right)."""
    world_size = len(results)
    wrong = {(rank, n) for rank, r in enumerate(results) for n in r["reference"]
             if not _close(r["learner"][n], r["reference"][n])}
    if not wrong:
        return []

    def everywhere(test) -> bool:
        """test(learner_grad, reference_grad, local_grad) holds for every wrong (rank, parameter)."""
        return all(test(results[rank]["learner"][n], results[rank]["reference"][n], results[rank]["local"][n])
                   for rank, n in wrong)
    if everywhere(lambda g, ref, local: g is None):
        return ["the gradients are gone (.grad is None): average them in place, do not zero or delete them"]
    if everywhere(lambda g, ref, local: _close(g, ref * world_size)):
        return [f"every gradient is {world_size} times too large: all_reduce sums, so divide by world_size"]
    if len(wrong) == world_size * len(results[0]["reference"]) and everywhere(lambda g, ref, local: _close(g, local)):
        return ["the gradients are unchanged: each rank still has only its own; all_reduce them"]
    problems = []
    bad_ranks = sorted({rank for rank, _ in wrong})
    if 0 not in bad_ranks:
        problems.append(f"rank 0 is right but rank(s) {bad_ranks} are not: every rank needs the average "
                        "(all_reduce, not reduce to rank 0)")
    names = sorted({n for _, n in wrong}, key=list(results[0]["reference"]).index)
    problems.append(f"these parameters do not hold the average: {', '.join(names)}")
    return problems


def check_average_gradients(fn: Callable, world_size: int = 2, timeout: float = 90) -> Report:
    """Run the learner's ``fn(model)`` after backward on ``world_size`` ranks, each with its own
    data, and report whether every rank's .grad equals torch DDP's."""
    report = Report()
    results = run_on_ranks(_run_learner, world_size, report, (worker_name(fn),), timeout=timeout)
    if results is None:
        return report
    problems = diagnose(results)
    for problem in problems:
        report.fail(problem)
    if not problems:
        n_params = len(results[0]["reference"])
        report.ok(f"on all {world_size} ranks, all {n_params} gradients equal DDP's (within {ATOL:g})")
    return report
