"""Checkers for lesson 00's exercises: 1, ``demo_basic(rank, world_size)`` returning its loss too, on 1 rank
and on 2; 2, ``who_am_i(rank, world_size, name)``, every rank's name in rank order."""

import contextlib
import io
import secrets
from collections.abc import Callable

import torch

from ddp_lib.errors import LaunchTimeout, WorkerError
from ddp_lib.exercises.checking import (
    COLLECTIVES,
    Report,
    as_number,
    check_on_ranks,
    failure,
    hang_report,
    run_counted,
    worker_name,
)

PARAMETERS = 10 * 10 + 10 + 5 * 10 + 5  # ToyModel: net1 (10 -> 10) and net2 (10 -> 5), weights and biases
RETURN_HINT = "return the loss and the parameters, for example: return round(loss.item(), 4), parameters"


def toy_model() -> torch.nn.Module:
    """ToyModel's layers, drawn in the same order, so one seed gives the same weights."""
    return torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5))


def start_parameters() -> torch.Tensor:
    """Rank 0's parameters before any step (its seed, 0), which DDP broadcasts to every rank, flattened."""
    torch.manual_seed(0)
    return torch.cat([p.detach().flatten() for p in toy_model().parameters()])


def own_losses(world_size: int) -> list[float]:
    """Each rank's loss in the fixed file: rank 0's weights (DDP's broadcast), each rank's batch from its seed."""
    torch.manual_seed(0)
    start = toy_model()
    losses = []
    for rank in range(world_size):
        torch.manual_seed(rank)
        toy_model()  # each rank builds its replica from its seed before drawing its batch
        inputs, labels = torch.randn(20, 10), torch.randn(20, 5)
        with torch.no_grad():
            losses.append(torch.nn.MSELoss()(start(inputs), labels).item())
    return losses


def split(result: object) -> tuple[float | None, list | None, str | None]:
    """(loss, parameters, None) from one rank's result, however the two are packed, or (None, None, the fix)."""
    if isinstance(result, dict):
        result = list(result.values())
    if not isinstance(result, (list, tuple)) or len(result) == PARAMETERS:
        shown = f"a list of {PARAMETERS} numbers" if isinstance(result, (list, tuple)) else f"a {type(result).__name__}"
        return None, None, f"returned {shown} only; {RETURN_HINT}"
    numbers = [as_number(part) for part in result]
    losses = [number for number in numbers if isinstance(number, float)]
    lists = [torch.as_tensor(part).flatten().tolist() for part in result
             if isinstance(part, (list, tuple, torch.Tensor)) and torch.as_tensor(part).numel() == PARAMETERS]
    if len(losses) != 1 or len(lists) != 1:
        return None, None, f"returned {len(result)} values; {RETURN_HINT}"
    return losses[0], lists[0], None


def run(fn: Callable, world_size: int, report: Report, timeout: float) -> list | None:
    """``fn``'s results on ``world_size`` ranks under ``ddp_lib.mp.labelled_spawn``, or None and a FAIL line
    that says why."""
    import ddp_lib.mp

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the ranks' "Running basic DDP example" lines
            return ddp_lib.mp.labelled_spawn(fn, args=(world_size,), nprocs=world_size, join=True, timeout=timeout)
    except LaunchTimeout as exc:
        report.fail(f"world_size {world_size}: rank(s) {', '.join(map(str, exc.running))} still running "
                    f"after {timeout:g} s{hang_report(exc)}")
    except WorkerError as exc:
        report.fail(f"world_size {world_size}: {failure(exc)}")
    return None


def check_loss_runs(fn: Callable, timeout: float = 120.0) -> Report:
    """A report on ``fn(rank, world_size)`` on 1 rank, then on 2: each rank's loss, and rank 0's parameters."""
    report, runs = Report(), {}
    for world_size in (1, 2):
        results = run(fn, world_size, report, timeout)
        if results is None:
            return report
        parts = [split(result) for result in results]
        if fix := next((f"rank {rank} {said}" for rank, (_, _, said) in enumerate(parts) if said), None):
            report.fail(f"world_size {world_size}: {fix}")
            return report
        expected = own_losses(world_size)
        for rank, ((loss, _, _), want) in enumerate(zip(parts, expected)):
            if abs(loss - want) > 1e-4:
                why = ("it is the mean of the ranks' losses: each rank's loss comes from its own batch, "
                       "before any averaging; return it as it is" if abs(loss - sum(expected) / len(expected)) <= 1e-4
                       else "return the loss of the forward pass, before optimizer.step(), and keep "
                       "torch.manual_seed(rank)")
                report.fail(f"world_size {world_size}: rank {rank} returned the loss {loss:.4f}, "
                            f"expected {want:.4f}; {why}")
                return report
        runs[world_size] = parts
        report.ok(f"world_size {world_size}: each rank's loss, "
                  + ", ".join(f"rank {rank} {loss:.4f}" for rank, (loss, _, _) in enumerate(parts)))
    first, second = torch.tensor(runs[1][0][1]), torch.tensor(runs[2][0][1])
    # One SGD step moves some parameter by about 1e-4 here; parameters taken before the step moved by none.
    if (first - start_parameters()).abs().max().item() < 1e-6:
        report.fail("world_size 1: rank 0 returned the parameters as they were before optimizer.step(); "
                    "return them after optimizer.step(), as the fixed file does")
        return report
    if not all(torch.equal(torch.tensor(parameters), second) for _, parameters, _ in runs[2]):
        report.fail("world_size 2: the ranks returned different parameters; return the model's parameters "
                    "after optimizer.step(), as the fixed file does")
        return report
    report.ok(f"rank 0's loss: {runs[1][0][0]:.4f} on 1 rank, {runs[2][0][0]:.4f} on 2 ranks "
              f"(the same: {abs(runs[1][0][0] - runs[2][0][0]) <= 1e-4})")
    report.ok(f"rank 0's parameters differ between the two runs by up to {(first - second).abs().max().item():.0e}")
    return report



def diagnose(rank: int, got: object, names: list[str], called: list[str]) -> str | None:
    """What is wrong in rank ``rank``'s answer, the ranks' names being ``names`` (None: nothing), with its fix."""
    expected = {"rank": rank, "world_size": len(names), "is_main": rank == 0, "everyone": names}
    if isinstance(got, dict) and isinstance(got.get("everyone"), tuple):
        got = {**got, "everyone": list(got["everyone"])}  # a tuple of the names is as good as the list
    if got == expected:
        return None
    if not isinstance(got, dict) or set(got) != set(expected):
        shown = sorted(got) if isinstance(got, dict) else f"a {type(got).__name__}"
        return f"rank {rank} returned {shown}; expected a dict with keys {list(expected)}"
    if key := next((key for key in ("rank", "world_size", "is_main") if got[key] != expected[key]), None):
        return f"rank {rank} returned {key}={got[key]!r}, expected {expected[key]!r}"
    everyone = got["everyone"]
    if len(names) > 1 and not called:
        return f"no collective ran, so rank {rank} knows only its own name: use dist.all_gather_object"
    if "gather_object" in called and "all_gather_object" not in called:
        return (f"rank {rank} has no list of names: gather_object gives the list to the destination rank only; "
                "all_gather_object gives it to every rank")
    if everyone is None and "all_gather_object" in called:
        return (f"rank {rank} returned everyone=None: all_gather_object returns None; it fills the list you pass it "
                "in place, so return that list")
    if not isinstance(everyone, list) or len(everyone) != len(names):
        return f"rank {rank} returned everyone={everyone!r}; expected a list of the {len(names)} ranks' names"
    slot = next(r for r, (mine, want) in enumerate(zip(everyone, names)) if mine != want)
    return f"rank {rank} returned everyone[{slot}]={everyone[slot]!r}; expected rank {slot}'s name, {names[slot]!r}"


def check_who_am_i(fn: Callable, world_sizes: tuple[int, ...] = (1, 2, 3), timeout: float = 60.0):
    """A report on ``fn(rank, world_size, name)`` on each world size, names drawn now: one line per world size."""
    names = [secrets.token_hex(4) for _ in range(max(world_sizes))]
    return check_on_ranks(run_counted, world_sizes, lambda runs: next(filter(None, (
        diagnose(rank, run["result"], names[:len(runs)], run["called"]) for rank, run in enumerate(runs))), None),
                          (worker_name(fn), COLLECTIVES, names), timeout=timeout,
                          passed="every rank returned its rank, the world size, is_main and every rank's name")
