"""Checkers for lesson 09's exercises.

1. ``evaluate(model, dataset, rank, world_size) -> float``: the accuracy of ``model`` over every
   sample of ``dataset`` exactly once, the same on every rank, although ``DistributedSampler``
   pads the shards with duplicates.
2. ``train_step(ddp_model, optimizer, micro_batches, max_norm) -> None``: one optimizer step over
   a list of (x, y) micro-batches: gradients accumulated with one all-reduce per step
   (``no_sync``), the loss averaged over the micro-batches, the synchronised gradient clipped.

Each checker runs the learner's function on every rank and compares with the exact answer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import Report, run_on_ranks

EVAL_SIZES = (11, 7)  # not multiples of 2: the sampler pads both
TOL = 1e-5


def _report(report: Report, problems: list[str], success: str) -> Report:
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(success)
    return report


def _run_evaluate(rank: int, world_size: int, evaluate: Callable, seed: int = 0) -> list[dict]:
    """In each rank: the learner's value and the candidate answers, for every size in EVAL_SIZES."""
    from torch.utils.data import DistributedSampler

    from ddp_lib.process_group import process_group
    from ddp_lib.workers.training_loop import EVAL_SEED, LoopNet, make_moons

    with process_group(rank, world_size):
        found = []
        for n_eval in EVAL_SIZES:
            torch.manual_seed(seed)
            model = LoopNet()
            dataset = make_moons(n_eval, seed=EVAL_SEED)
            with torch.no_grad():
                right = (model(dataset.tensors[0]).argmax(1) == dataset.tensors[1]).double()

            def mean_over(drop_last: bool, shard: int | None = None, dataset=dataset, right=right) -> float:
                picked = []
                for r in range(world_size) if shard is None else [shard]:
                    picked += list(DistributedSampler(dataset, world_size, r, shuffle=False, drop_last=drop_last))
                return right[picked].mean().item()

            value = evaluate(model, dataset, rank, world_size)
            found.append({"n_eval": n_eval, "value": value if isinstance(value, (int, float)) else repr(value)[:60],
                          "exact": right.mean().item(), "padded": mean_over(False),
                          "drop_last": mean_over(True), "local": mean_over(False, rank)})
        return found


def diagnose_evaluate(results: list[list[dict]]) -> list[str]:
    """Problems with per-rank results of ``_run_evaluate``, most telling first (empty: all right)."""
    problems = []
    for case in range(len(EVAL_SIZES)):
        rows = [per_rank[case] for per_rank in results]
        n_eval, truth = rows[0]["n_eval"], rows[0]
        values = [row["value"] for row in rows]
        if any(isinstance(v, str) for v in values):
            bad = next(v for v in values if isinstance(v, str))
            return [f"evaluate returned {bad}; return the accuracy as a float"]
        if any(abs(v - values[0]) > TOL for v in values):
            local = all(abs(row["value"] - row["local"]) < TOL for row in rows)
            hint = "; each is its own shard's: all_reduce the correct and counted samples" if local else ""
            problems.append(f"{n_eval} samples: the ranks returned different accuracies "
                            f"{[round(v, 4) for v in values]}{hint}")
            continue
        value = values[0]
        if abs(value - truth["exact"]) < TOL:
            continue
        if abs(value - truth["padded"]) < TOL:
            problems.append(f"{n_eval} samples: {value:.4f} counts the padding duplicate(s) DistributedSampler adds "
                            f"(exact: {truth['exact']:.4f}); skip the positions at or past len(dataset)")
        elif abs(value - truth["drop_last"]) < TOL:
            problems.append(f"{n_eval} samples: {value:.4f} leaves out the samples drop_last=True drops "
                            f"(exact: {truth['exact']:.4f}); count every sample once")
        else:
            problems.append(f"{n_eval} samples: returned {value:.4f}, "
                            f"the accuracy over all samples is {truth['exact']:.4f}")
    return problems


def check_evaluate(evaluate: Callable, world_size: int = 2) -> Report:
    """Run the learner's ``evaluate(model, dataset, rank, world_size)`` on every rank, for held-out sets
    of 11 and 7 samples; return the report."""
    report = Report()
    results = run_on_ranks(_run_evaluate, world_size, report, kwargs=dict(evaluate=evaluate), timeout=120)
    if results is None:
        return report
    return _report(report, diagnose_evaluate(results),
                   f"on {world_size} ranks every rank returns the exact accuracy, padding or not "
                   f"({', '.join(str(n) for n in EVAL_SIZES)} samples)")


# Exercise 2: a step with gradient accumulation and clipping.
STEPS, MICRO_BATCHES, MICRO_BATCH_SIZE, LR, MAX_NORM = 3, 2, 8, 0.5, 0.6


def micro_batches_for(step: int, rank: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches of ``step``: disjoint slices of the training set."""
    from ddp_lib.workers.training_loop import make_moons

    x, y = make_moons().tensors
    batches = []
    for k in range(MICRO_BATCHES):
        start = ((step * MICRO_BATCHES + k) * world_size + rank) * MICRO_BATCH_SIZE
        batches.append((x[start:start + MICRO_BATCH_SIZE], y[start:start + MICRO_BATCH_SIZE]))
    return batches


def reference_params(world_size: int, divide: bool = True, clip: bool = True) -> torch.Tensor:
    """One process over the global batch (every rank's micro-batches): what the step must produce.
    ``divide``/``clip`` False give the results of the usual mistakes."""
    from ddp_lib.workers.training_loop import LoopNet

    torch.manual_seed(0)
    model = LoopNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        for k in range(MICRO_BATCHES):
            x = torch.cat([micro_batches_for(step, r, world_size)[k][0] for r in range(world_size)])
            y = torch.cat([micro_batches_for(step, r, world_size)[k][1] for r in range(world_size)])
            loss = nn.functional.cross_entropy(model(x), y)
            (loss / MICRO_BATCHES if divide else loss).backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _counting_allreduce(state: dict, bucket):  # no annotations: DDP checks them, and here they are strings
    """DDP's averaging all-reduce, counted."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    state["all_reduces"] += 1
    return default_hooks.allreduce_hook(None, bucket)


def _run_train_step(rank: int, world_size: int, train_step: Callable) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group
    from ddp_lib.workers.training_loop import LoopNet

    with process_group(rank, world_size):
        torch.manual_seed(0)
        model = LoopNet()
        ddp_model = DDP(model)
        state = {"all_reduces": 0}
        ddp_model.register_comm_hook(state, _counting_allreduce)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        for step in range(STEPS):
            optimizer.zero_grad()
            train_step(ddp_model, optimizer, micro_batches_for(step, rank, world_size), MAX_NORM)
        return {"params": torch.cat([p.detach().flatten() for p in model.parameters()]),
                "all_reduces": state["all_reduces"]}


def diagnose_train_step(results: list[dict]) -> list[str]:
    """Problems with per-rank results of ``_run_train_step`` (empty: all right)."""
    world_size = len(results)
    params = [r["params"] for r in results]
    if any(not torch.allclose(p, params[0], atol=TOL) for p in params):
        return ["the ranks' parameters differ: every rank must step on the same, all-reduced gradient "
                "(is the last micro-batch's backward outside no_sync?)"]
    problems = []
    if not torch.allclose(params[0], reference_params(world_size), atol=TOL):
        for divide, clip, hint in ((False, True, "divide each micro-batch's loss by the number of micro-batches"),
                                   (True, False, "clip with clip_grad_norm_(..., max_norm) after the last backward"),
                                   (False, False, "divide the loss by the number of micro-batches, and clip")):
            if torch.allclose(params[0], reference_params(world_size, divide, clip), atol=TOL):
                problems.append(f"the parameters differ from one process on the global batch: {hint}")
                break
        else:
            problems.append("the parameters differ from one process on the global batch: accumulate every "
                            "micro-batch, divide the loss by their number, clip the synchronised gradient, step once")
    expected = STEPS  # this model fits in one bucket: one all-reduce per step
    if results[0]["all_reduces"] != expected:
        problems.append(f"DDP all-reduced {results[0]['all_reduces']} times in {STEPS} steps, expected {expected}: "
                        "run every micro-batch but the last inside ddp_model.no_sync()")
    return problems


def check_train_step(train_step: Callable, world_size: int = 2) -> Report:
    """Run the learner's ``train_step(ddp_model, optimizer, micro_batches, max_norm)`` for 3 steps of
    2 micro-batches on every rank; return the report."""
    report = Report()
    results = run_on_ranks(_run_train_step, world_size, report, kwargs=dict(train_step=train_step), timeout=120)
    if results is None:
        return report
    return _report(report, diagnose_train_step(results),
                   f"on {world_size} ranks the parameters equal one process on the global batch, "
                   f"with one all-reduce per step")


# The starting points the lesson's exercise cells write to disk; both fail their checker.
EVALUATE_STUB = '''\
import torch
from torch.utils.data import DistributedSampler


def evaluate(model, dataset, rank, world_size):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    correct = 0
    with torch.no_grad():
        for index in sampler:
            x, y = dataset[index]
            correct += int(model(x.unsqueeze(0)).argmax(1).item() == y.item())
    return correct / len(sampler)
'''

TRAIN_STEP_STUB = '''\
from torch import nn


def train_step(ddp_model, optimizer, micro_batches, max_norm):
    for x, y in micro_batches:
        loss = nn.functional.cross_entropy(ddp_model(x), y)
        loss.backward()
    optimizer.step()
'''
