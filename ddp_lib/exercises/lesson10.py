"""Checker for lesson 10's exercise: ``state_bytes(optimizer)`` under DDP, ZeRO-1 and FSDP2; the predictions."""

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import Report, run_on_ranks
from ddp_lib.process_group import process_group
from ddp_lib.workers.beyond_ddp import batch, make_deep_mlp, optimizer_state_bytes, tensor_bytes, train_step, wrap

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
