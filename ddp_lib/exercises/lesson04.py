"""Checker for lesson 04's exercise: ``average_gradients(model)``, called after backward on every
rank, must leave in each .grad the mean of that gradient over all ranks (what DDP does).

Each rank draws its own batch from fresh randomness (``os.urandom``), runs one backward through a
plain model, calls the learner's function and returns its batch beside the .grad it got. Only the
parent sees every rank's batch: it recomputes each rank's gradient and their mean. No rank holds
another rank's data or the expected answer. The checker also counts the collectives the learner's
function ran (torch's profiler sees every route to them; a barrier, which carries no data, does not
count) and requires each rank's own gradients (or their share, divided by the world size) among
what it gave a collective, so an average assembled from gradients passed through the rendezvous
store or files is refused, unless the gradients were also given to a collective whose result the
code then throws away (which operation it was, and what became of its result, is not checked).
That last test runs in the parent, on the gradients it recomputes from
the batch: a rank keeps no record of its own gradients for the learner's code to empty. It runs on
2 and then 3 ranks, so a world size written into the code is caught.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import (
    NOT_CARRYING_DATA,
    Report,
    load_worker,
    run_on_ranks,
    watching_collectives,
    worker_name,
)

ATOL = 1e-6
WORLD_SIZES = (2, 3)
BATCH = 4


def _private_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch, from randomness no other process can reproduce."""
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
    return torch.randn(BATCH, 8, generator=generator), torch.randn(BATCH, 4, generator=generator)


def _local_grads(seed: int, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    from ddp_lib.workers.gradients import make_mlp

    model = make_mlp(seed)
    nn.functional.mse_loss(model(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _run_learner(rank: int, world_size: int, target: str, seed: int) -> dict:
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.gradients import make_mlp

    average_gradients = load_worker(target)
    with process_group(rank, world_size) as device:
        x, y = _private_batch()
        # The batch as it was drawn, kept as immutable bytes: the learner's code runs in this
        # process and could reach x and y (through frames or gc) and change them in place.
        drawn = tuple((t.numpy().tobytes(), tuple(t.shape)) for t in (x, y))
        model = make_mlp(seed).to(device)  # same weights on every rank, as after DDP's broadcast
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        with watching_collectives() as watched:
            average_gradients(model)
        collectives, sent = watched.counts, watched.inputs
        x, y = (torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape) for data, shape in drawn)
        over_world = sent.over(world_size)  # a collective in a smaller group reaches not every rank
        return {
            "x": x, "y": y,
            "learner": {n: None if p.grad is None else p.grad.detach().clone().cpu()
                        for n, p in model.named_parameters()},
            "collectives": dict(collectives),
            "sent": {"values": over_world.values, "raw": over_world.raw},
        }


def _sent(grad: torch.Tensor, sent: dict, world_size: int) -> bool:
    """Whether ``grad`` (or grad / world_size) went into a collective: as a contiguous run of a
    tensor's values (alone, or in one flat message as a DDP bucket), or as the raw bytes of a
    pickled tensor (``all_gather_object``)."""
    flat = grad.reshape(-1).double()
    # A pickled tensor holds its float32 values as raw bytes, at an offset we do not know.
    unpickled = [torch.frombuffer(bytearray(raw[k:k + (len(raw) - k) // 4 * 4]), dtype=torch.float32).tolist()
                 for raw in sent["raw"] for k in range(4) if len(raw) - k >= 4]
    for values in sent["values"] + unpickled:
        if len(values) < len(flat):
            continue
        windows = torch.tensor(values, dtype=torch.float64).unfold(0, len(flat), 1)
        for target in (flat, flat / world_size):
            if torch.isclose(windows, target, rtol=1e-5, atol=1e-8).all(dim=1).any():
                return True
    return False


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def diagnose(results: list[dict], seed: int) -> list[str]:
    """Problems found, one sentence each, most telling first (empty when all is right). ``results``
    are the ranks' returns: their private batch, the learner's .grad, the collectives counted and what
    they gave those collectives."""
    world_size = len(results)
    local = [_local_grads(seed, r["x"], r["y"]) for r in results]
    expected = {n: sum(g[n] for g in local) / world_size for n in local[0]}
    silent = [rank for rank, r in enumerate(results) if not set(r["collectives"]) - NOT_CARRYING_DATA]
    if silent:
        return [f"rank(s) {silent} ran no collective that moves data (a barrier only waits): a rank cannot know "
                "the other ranks' gradients without one (all_reduce them)"]
    wrong = {(rank, n) for rank, r in enumerate(results) for n in expected
             if not _close(r["learner"][n], expected[n])}
    if not wrong:
        unsent = {rank: names for rank, r in enumerate(results)
                  if (names := [n for n, g in local[rank].items() if not _sent(g, r["sent"], world_size)])}
        if unsent:
            rank, names = next(iter(unsent.items()))
            return [f"the averages are right, but rank(s) {sorted(unsent)} gave no collective their own gradients "
                    f"(rank {rank}: {', '.join(names)}): they must travel through the process group (all_reduce), "
                    "not through the store or files"]
        return []

    def everywhere(test) -> bool:
        """test(learner_grad, expected_grad, this_rank_local_grad) holds for every wrong (rank, parameter)."""
        return all(test(results[rank]["learner"][n], expected[n], local[rank][n]) for rank, n in wrong)
    if everywhere(lambda g, ref, own: g is None):
        return ["the gradients are gone (.grad is None): average them in place, do not zero or delete them"]
    if everywhere(lambda g, ref, own: _close(g, ref * world_size)):
        return [f"every gradient is {world_size} times too large: all_reduce sums, so divide by world_size"]
    for k in range(1, 9):
        if k != world_size and everywhere(lambda g, ref, own, k=k: _close(g, ref * world_size / k)):
            return [f"on {world_size} ranks every gradient is divided by {k}: divide by dist.get_world_size(), "
                    "not by a number written in the code"]
    if len(wrong) == world_size * len(expected) and everywhere(lambda g, ref, own: _close(g, own)):
        return ["the gradients are unchanged: each rank still has only its own; all_reduce them"]
    problems = []
    bad_ranks = sorted({rank for rank, _ in wrong})
    if 0 not in bad_ranks:
        problems.append(f"rank 0 is right but rank(s) {bad_ranks} are not: every rank needs the average "
                        "(all_reduce, not reduce to rank 0)")
    names = sorted({n for _, n in wrong}, key=list(expected).index)
    problems.append(f"these parameters do not hold the average on rank(s) {bad_ranks}: {', '.join(names)}")
    return problems


def check_average_gradients(fn: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES, seed: int = 0,
                            timeout: float = 90) -> Report:
    """Run the learner's ``fn(model)`` after backward on each of ``world_sizes`` ranks in turn, each
    rank with its own private data, and report whether every rank's .grad is the mean over ranks.
    Stops at the first world size that fails."""
    report = Report()
    for world_size in world_sizes:
        results = run_on_ranks(_run_learner, world_size, report, (worker_name(fn), seed), timeout=timeout)
        if results is None:
            return report
        problems = diagnose(results, seed)
        if report.fail_each(f"world_size {world_size}", problems):
            return report
        n_params = len(results[0]["learner"])
        report.ok(f"on all {world_size} ranks, all {n_params} gradients are the mean over the ranks "
                  f"(within {ATOL:g})")
    return report
