"""Checker for lesson 10's exercise: ``state_bytes(optimizer) -> int``, the bytes of optimizer state
this rank holds, right for a plain optimizer under DDP, for ``ZeroRedundancyOptimizer`` (ZeRO-1)
and for an optimizer over FSDP2's DTensor parameters; and the learner's prediction of what rank 0
holds for the lesson's model, checked against what it does hold.

Every rank runs two rounds per strategy. First the lesson's model and one Adam step: its count is
compared with the prediction. Then a small model on which each rank, from its own fresh randomness,
drops the gradients of some parameters before the step (they get no state) and turns Adam's
``amsgrad`` on or off (a third buffer per parameter), then clears all gradients: no count made from
parameter sizes, gradients, the world size or the rank can match, only one made from the state.
A count that leaves out Adam's ``step`` entries is named as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ddp_lib.exercises.checking import Report, run_on_ranks

STRATEGIES = ("ddp", "zero1", "fsdp")
PREDICTION_TOLERANCE = 0.02  # the ZeRO formula lands within 1% of DDP's and FSDP2's counts on 3 ranks

def _build(strategy: str, width: int, layers: int, amsgrad: bool):
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer

    from ddp_lib.workers.beyond_ddp import make_deep_mlp, wrap

    model, optimizer = wrap(make_deep_mlp(width=width, layers=layers), strategy, lr=1e-3)
    if not amsgrad:
        return model, optimizer
    if strategy == "zero1":
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3,
                                              amsgrad=True)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)


def _step_without_some_gradients(model, optimizer, rank: int) -> None:
    """One step in which this rank drops the gradients of random parameters before the optimizer
    runs, then clears every gradient. Nothing random outlives this call."""
    from torch import nn

    from ddp_lib.workers.beyond_ddp import batch

    width = next(model.parameters()).shape[-1]
    x, y = batch(0, rank, 8, width)
    nn.functional.mse_loss(model(x), y).backward()
    params = list(model.parameters())
    for param, byte in zip(params, os.urandom(len(params))):
        if byte & 1:
            param.grad = None  # the optimizer skips it: no state for it on this rank
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _bytes_without_step(optimizer) -> int:
    """What a count that leaves out Adam's ``step`` entries gives (a classic mistake)."""
    import torch

    from ddp_lib.workers.beyond_ddp import tensor_bytes

    inner = getattr(optimizer, "optim", optimizer)
    return tensor_bytes(t for state in inner.state.values() for key, t in state.items()
                        if key != "step" and isinstance(t, torch.Tensor))


def _run_state_bytes(rank: int, world_size: int, state_bytes: Callable) -> dict:
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.beyond_ddp import batch, optimizer_state_bytes, train_step

    def answer(optimizer) -> dict:
        value = state_bytes(optimizer)
        return {"value": value if type(value) is int else repr(value)[:60], "exact": optimizer_state_bytes(optimizer),
                "without_step": _bytes_without_step(optimizer)}

    found = {}
    with process_group(rank, world_size):
        for strategy in STRATEGIES:
            model, optimizer = _build(strategy, 256, 4, amsgrad=False)  # the lesson's model
            train_step(model, optimizer, *batch(0, rank, 16, 256))
            lesson = answer(optimizer)
            model, optimizer = _build(strategy, 64, 2, amsgrad=bool(os.urandom(1)[0] & 1))
            _step_without_some_gradients(model, optimizer, rank)
            found[strategy] = {"lesson": lesson, "random": answer(optimizer)}
    return found


HINTS = {
    "zero1": "ZeroRedundancyOptimizer keeps this rank's shard of the state in its .optim attribute",
    "fsdp": "the state tensors are DTensors: count their .to_local() part, not their global shape",
    "ddp": "count every tensor in optimizer.state (exp_avg, exp_avg_sq and step for Adam)",
}


def diagnose(results: list[dict], reveal: bool = True) -> list[str]:
    """Problems with the learner's counts in per-rank results of ``_run_state_bytes`` (empty when
    all is right); one message per strategy. ``reveal``: name the bytes the rank holds (only once
    the learner's predictions are right, which those bytes would otherwise give away)."""
    problems = []
    for strategy in STRATEGIES:
        for rank, found in enumerate(results):
            row, other = found[strategy]["lesson"], found[strategy]["random"]
            if isinstance(row["value"], str) or isinstance(other["value"], str):
                bad = row["value"] if isinstance(row["value"], str) else other["value"]
                problems.append(f"{strategy}: state_bytes returned {bad}; return an int")
            elif row["value"] != row["exact"] and row["value"] == row["without_step"]:
                problems.append(f"{strategy}, rank {rank}: returned {row['value']} bytes, which leaves out Adam's "
                                "`step` entries (a one-element tensor per parameter): count every tensor in the "
                                "state, whatever its key")
            elif row["value"] != row["exact"]:
                held = f"this rank holds {row['exact']}" if reveal else "not what this rank holds"
                problems.append(f"{strategy}, rank {rank}: returned {row['value']} bytes, {held}; {HINTS[strategy]}")
            elif other["value"] != other["exact"]:
                problems.append(f"{strategy}, rank {rank}: returned {other['value']} bytes after a step in which some "
                                "parameters had no gradient (they "
                                "get no state) or Adam kept amsgrad's third buffer; count the tensors in the "
                                "state, not the parameters")
            else:
                continue
            break
    return problems


def valid_prediction(predicted) -> bool:
    return isinstance(predicted, dict) and all(type(predicted.get(s)) is int for s in STRATEGIES)


MISS_BANDS = (1.1, 1.5, 2.0)  # a missed prediction is told only as one of these ratio bands, never the bytes


def _miss(guess: int, held: int) -> str:
    """How far a prediction is off, without the bytes held: too high or too low, and a ratio band."""
    direction = "too high" if guess > held else "too low"
    ratio = guess / held if guess > held else (held / guess if guess > 0 else float("inf"))
    upper = next((band for band in MISS_BANDS if ratio <= band), None)
    band = f"more than {MISS_BANDS[-1]}" if upper is None else f"up to {upper}"
    return f"{direction}, by a factor of {band}"


def compare_predictions(predicted: dict, results: list[dict], report: Report) -> bool:
    """One line per strategy: the learner's prediction of rank 0's bytes against what rank 0 holds.
    The bytes held are named only for a prediction within tolerance, so that they cannot be copied
    into the next try. True when every prediction is within tolerance."""
    if not valid_prediction(predicted):
        report.fail(f"predicted must give an int (bytes on rank 0) for each of {', '.join(map(repr, STRATEGIES))}, "
                    f"got {predicted!r}")
        return False
    right = True
    for strategy in STRATEGIES:
        held, guess = results[0][strategy]["lesson"]["exact"], predicted[strategy]
        line = f"{strategy}: you predicted {guess:,} bytes on rank 0"
        if abs(guess - held) <= PREDICTION_TOLERANCE * held:
            report.ok(f"{line}, it holds {held:,}")
        else:
            right = False
            report.fail(f"{line}: {_miss(guess, held)}")
    return right


def check_state_bytes(state_bytes: Callable, predicted: dict, world_size: int = 3) -> Report:
    """Run the learner's ``state_bytes(optimizer)`` after an Adam step under DDP, ZeRO-1 and FSDP2
    on every rank, compare ``predicted`` ({strategy: bytes on rank 0 for the lesson's model}) with
    what rank 0 holds, and return the report."""
    if not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"world_size must be an int of at least 2, got {world_size!r}")
    report = Report()
    results = run_on_ranks(_run_state_bytes, world_size, report, kwargs=dict(state_bytes=state_bytes), timeout=120)
    if results is None:
        return report
    predictions_right = compare_predictions(predicted, results, report)
    problems = diagnose(results, reveal=predictions_right)
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(f"on {world_size} ranks state_bytes is exact under DDP, ZeRO-1 and FSDP2")
    return report
