"""Checkers for lesson 10's exercises: ``state_bytes(optimizer)`` under DDP, ZeRO-1 and FSDP2; the predictions."""

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from ddp_lib.exercises.checking import Report, run_on_ranks
from ddp_lib.process_group import process_group
from ddp_lib.workers.beyond_ddp import (
    activation_bytes,
    batch,
    make_deep_mlp,
    optimizer_state_bytes,
    tensor_bytes,
    train_step,
    wrap,
)

STRATEGIES = ("ddp", "zero1", "fsdp")
PREDICTION_TOLERANCE = 0.02  # the ZeRO formula lands within 1% of DDP's and FSDP2's counts on 3 ranks
HINTS = {"zero1": "ZeroRedundancyOptimizer keeps this rank's shard of the state in its .optim attribute",
         "fsdp": "the state tensors are DTensors: count their .to_local() part, not their global shape",
         "ddp": "count every tensor in optimizer.state (exp_avg, exp_avg_sq and step for Adam)"}


def _run_state_bytes(rank: int, world_size: int, state_bytes: Callable) -> dict:
    """In each rank, per strategy and model: the learner's count, the exact one, and the one without Adam's step."""
    def answer(optimizer) -> dict:
        value, inner = state_bytes(optimizer), getattr(optimizer, "optim", optimizer)
        without_step = tensor_bytes(t for state in inner.state.values() for key, t in state.items()
                                    if key != "step" and isinstance(t, torch.Tensor))
        return {"value": value if type(value) is int else repr(value)[:60], "exact": optimizer_state_bytes(optimizer),
                "without_step": without_step}

    found = {}
    with process_group(rank, world_size):
        for strategy in STRATEGIES:
            model, optimizer = wrap(make_deep_mlp(width=256, layers=4), strategy, lr=1e-3)  # the lesson's model
            train_step(model, optimizer, *batch(0, rank, 16, 256))
            lesson = answer(optimizer)
            model, optimizer = wrap(make_deep_mlp(width=64, layers=2), strategy, lr=1e-3)  # half without a gradient
            x, y = batch(0, rank, 8, 64)
            nn.functional.mse_loss(model(x), y).backward()
            for param in list(model.parameters())[::2]:
                param.grad = None  # no gradient, so Adam gives it no state
            optimizer.step()
            found[strategy] = {"lesson": lesson, "random": answer(optimizer)}
    return found


def _problem(strategy: str, rank: int, found: dict) -> str | None:
    """What is wrong with this rank's counts under ``strategy`` (None: both exact); the bytes held are not said."""
    row, other = found["lesson"], found["random"]
    if bad := next((r["value"] for r in (row, other) if isinstance(r["value"], str)), None):
        return f"{strategy}: state_bytes returned {bad}; return an int"
    said = f"{strategy}, rank {rank}: returned {row['value']} bytes"
    if row["value"] == row["without_step"] != row["exact"]:
        return (f"{said}, which leaves out Adam's `step` entries (a one-element tensor per parameter): count "
                "every tensor in the state, whatever its key")
    if row["value"] != row["exact"]:
        return f"{said}, not what this rank holds; {HINTS[strategy]}"
    if other["value"] != other["exact"]:
        return (f"{strategy}, rank {rank}: returned {other['value']} bytes after a step in which some parameters had "
                "no gradient (they get no state): count the tensors in the state, not the parameters")
    return None


def compare_predictions(predicted: dict, results: list[dict], report: Report) -> None:
    """One line per strategy: is the prediction of rank 0's bytes within tolerance? The bytes held only if it is."""
    if not isinstance(predicted, dict) or any(type(predicted.get(s)) is not int for s in STRATEGIES):
        report.fail(f"predicted must give an int (bytes on rank 0) for each of {', '.join(map(repr, STRATEGIES))}, "
                    f"got {predicted!r}")
        return
    for strategy in STRATEGIES:
        held, guess = results[0][strategy]["lesson"]["exact"], predicted[strategy]
        line = f"{strategy}: you predicted {guess:,} bytes on rank 0"
        if abs(guess - held) <= PREDICTION_TOLERANCE * held:
            report.ok(f"{line}, it holds {held:,}")
        else:
            report.fail(f"{line}: too {'high' if guess > held else 'low'}, by more than {PREDICTION_TOLERANCE:.0%}")


def check_state_bytes(state_bytes: Callable, predicted: dict, world_size: int = 3) -> Report:
    """A report on ``state_bytes`` under DDP, ZeRO-1 and FSDP2 on every rank, and on ``predicted`` (rank 0's bytes)."""
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an int of at least 2, got {world_size!r}")
    report = Report()
    if (results := run_on_ranks(_run_state_bytes, world_size, report, (state_bytes,), timeout=120)) is None:
        return report
    compare_predictions(predicted, results, report)
    problems = [next(filter(None, (_problem(s, rank, r[s]) for rank, r in enumerate(results))), None)
                for s in STRATEGIES]  # per strategy, the first rank's
    for problem in filter(None, problems):
        report.fail(problem)
    if not any(problems):
        report.ok(f"on {world_size} ranks state_bytes is exact under DDP, ZeRO-1 and FSDP2")
    return report


# Exercise 2: plain SGD's bytes on rank 0, on 2 ranks, as the lesson's bars count them.
SGD_KEYS = ("state", "ddp", "zero1", "fsdp")


def sgd_bytes(world_size: int = 2) -> dict[str, int]:
    """Rank 0's bytes for the lesson's model under plain SGD: state, and the total under each strategy;
    also "activations", the bars' grey part on rank 0 (what one forward of its batch of 16 leaves held)."""
    model = make_deep_mlp(width=256, layers=4)
    shapes = [p.shape for p in model.parameters()]
    n = sum(s.numel() for s in shapes)
    rank0 = sum(-(-s[0] // world_size) * s[1:].numel() for s in shapes)  # FSDP2 cuts rows, rank 0 gets ceil
    return {"state": 0, "ddp": 3 * n * 4, "zero1": 3 * n * 4, "fsdp": 2 * rank0 * 4, "n": n, "rank0": rank0,
            "activations": activation_bytes(model, *batch(0, 0, 16, 256))}


def _near(value: int, target: int) -> bool:
    return abs(value - target) <= PREDICTION_TOLERANCE * max(target, 1)


def check_sgd_prediction(predicted: dict) -> Report:
    """A report on ``predicted``: plain SGD's state bytes and each strategy's total bytes on rank 0, on 2 ranks."""
    report = Report()
    if not isinstance(predicted, dict) or any(type(predicted.get(k)) is not int for k in SGD_KEYS):
        report.fail(f"predicted_sgd must give an int (bytes on rank 0) for each of {', '.join(map(repr, SGD_KEYS))}, "
                    f"got {predicted!r}")
        return report
    right = sgd_bytes()
    n = right["n"]
    state, momentum = predicted["state"], n * 4
    if state != 0:
        why = ("a momentum_buffer per parameter, which SGD keeps only when momentum is not 0"
               if _near(state, momentum) else "state, but plain SGD stores nothing in optimizer.state")
        report.fail(f"state: you predicted {state:,} bytes, {why}: predict 0")
    else:
        report.ok("state: 0 bytes, plain SGD keeps no state")
    mistakes = {  # strategy: ((a wrong total, why), ...)
        "ddp": ((2 * n * 4, "that leaves out DDP's bucket copy of the gradients (parameters, gradients, bucket)"),
                (4 * n * 4, "that counts a state as large as the parameters; plain SGD has none")),
        "zero1": ((3 * n * 2, "ZeRO-1 shards only the optimizer state, and there is none: the same bytes as DDP"),
                  (2 * n * 4, "that leaves out the plain DDP's bucket copy: ZeRO-1 wraps the optimizer, not the "
                              "model")),
        "fsdp": ((3 * right["rank0"] * 4, "FSDP2 has no DDP bucket: count rank 0's shard of parameters and gradients"),
                 (2 * n * 4, "FSDP2 shards the parameters and gradients: rank 0 holds about half of each tensor"))}
    for strategy in ("ddp", "zero1", "fsdp"):
        guess, held = predicted[strategy], right[strategy]
        line = f"{strategy}: you predicted {guess:,} bytes on rank 0"
        grey = ((held + right["activations"], "that counts the bars' grey part, the activations, which backward "
                 "frees: leave it out"),)
        if _near(guess, held):
            report.ok(f"{line}; the sizes give {held:,}")
        elif why := next((why for wrong, why in mistakes[strategy] + grey if _near(guess, wrong)), None):
            report.fail(f"{line}; {why}")
        else:
            report.fail(f"{line}: too {'high' if guess > held else 'low'}, by more than {PREDICTION_TOLERANCE:.0%}")
    return report


# Exercise 3: reshard_after_forward=2 on 4 ranks, against True and False.
FORWARD_WORDS = ("like True", "between", "like False")


def check_reshard_prediction(predicted: dict) -> Report:
    """A report on ``predicted``: all-gathers per step with ``reshard_after_forward=2`` on 4 ranks, and where
    the forward's bytes lie against ``True`` (10 all-gathers) and ``False`` (5)."""
    report = Report()
    gathers, forward = (predicted.get(k) if isinstance(predicted, dict) else None for k in ("all_gathers", "forward"))
    if type(gathers) is not int or forward not in FORWARD_WORDS:
        report.fail(f"predicted_reshard must give 'all_gathers' an int and 'forward' one of "
                    f"{', '.join(map(repr, FORWARD_WORDS))}, got {predicted!r}")
        return report
    if gathers == 10:
        report.ok("all_gathers: 10 per step, as with True: backward gathers each layer again, from 2 ranks")
    elif gathers == 5:
        report.fail("all_gathers: 5 is False's count, where the forward keeps each full weight; with 2 the forward "
                    "still reshards (to halves), so backward all-gathers each of the 5 layers again")
    else:
        report.fail(f"all_gathers: {gathers} per step; count one all-gather per layer (5) in forward, and one more "
                    "per layer in backward when the forward resharded")
    if forward == "between":
        report.ok("forward: between, each rank keeps half of each weight, more than True's quarter, less than False")
    else:
        report.fail(f"forward: {forward!r}; after each layer's forward a rank keeps its weight sharded over 2 ranks, "
                    "a half: more than True's quarter, less than False's full weight")
    return report


def reshard_groups(rank: int, world_size: int, reshard: int = 2) -> list[int]:
    """In each rank: one step of the lesson's model, each Linear ``fully_shard``-ed with
    ``reshard_after_forward=reshard``; the number of ranks in each all-gather's group, in call order."""
    from torch.distributed.fsdp import fully_shard

    sizes: list[int] = []
    original = dist.all_gather_single  # FSDP2 calls it by this name in torch 2.13 (_fsdp_collectives.py)

    def noting(*args, group=None, **kwargs):
        sizes.append(dist.get_world_size(group))
        return original(*args, group=group, **kwargs)

    with process_group(rank, world_size):
        model = make_deep_mlp(width=256, layers=4)  # the lesson's model, seeded alike on every rank
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, reshard_after_forward=reshard)
        fully_shard(model)
        x, y = batch(0, rank, 16, 256)
        dist.all_gather_single = noting
        try:
            nn.functional.mse_loss(model(x), y).backward()
        finally:
            dist.all_gather_single = original
    return sizes


def show_reshard(world_size: int = 4, reshard: int = 2) -> list[int]:
    """Run ``reshard_groups`` on ``world_size`` ranks; print rank 0's all-gathers and their group sizes."""
    from ddp_lib.launch import run_ranks

    sizes = run_ranks(reshard_groups, world_size, kwargs=dict(reshard=reshard), timeout=120, show_output=False)[0]
    print(f"reshard_after_forward={reshard} on {world_size} ranks: {len(sizes)} all-gathers in a step; "
          f"ranks in each one's group: {sizes}")
    return sizes


# Exercise 4: a checkpoint of 2 ranks resumed on 4, against a straight 4-rank run.
def check_resume_prediction(losses_match: object) -> Report:
    """A report on ``losses_match``: do the resumed steps' losses equal those of a straight 4-rank run?"""
    report = Report()
    if type(losses_match) is not bool:
        report.fail(f"losses_match must be True or False, got {losses_match!r}")
    elif losses_match:
        report.fail("losses_match: True; each rank reads a batch of its own, so the first two steps, on 2 ranks, "
                    "trained on 32 samples each, the straight run's on 64: the weights differ when the 4 ranks load")
    else:
        report.ok("losses_match: False, the load works but the saved weights come from 2 ranks' data")
    return report
