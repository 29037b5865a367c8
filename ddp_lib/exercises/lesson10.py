"""Checker for lesson 10's exercise: ``state_bytes(optimizer) -> int``, the bytes of optimizer state
this rank holds, right for a plain optimizer under DDP, for ``ZeroRedundancyOptimizer`` (ZeRO-1)
and for an optimizer over FSDP2's DTensor parameters.

The checker takes one Adam step under each strategy on every rank and compares the learner's count
with the exact one (the bytes of the local tensors in the optimizer's state).
"""

from __future__ import annotations

from collections.abc import Callable

from ddp_lib.exercises.checking import Report, run_on_ranks

STRATEGIES = ("ddp", "zero1", "fsdp")

STATE_BYTES_STUB = '''\
import torch


def state_bytes(optimizer):
    return sum(t.numel() * t.element_size()
               for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor))
'''


def _run_state_bytes(rank: int, world_size: int, state_bytes: Callable) -> dict:
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.beyond_ddp import batch, make_mlp, optimizer_state_bytes, train_step, wrap

    found = {}
    with process_group(rank, world_size):
        for strategy in STRATEGIES:
            model, optimizer = wrap(make_mlp(width=64, layers=2), strategy, lr=1e-3)
            train_step(model, optimizer, *batch(0, rank, 8, 64))
            value = state_bytes(optimizer)
            found[strategy] = {"value": value if isinstance(value, int) else repr(value)[:60],
                               "exact": optimizer_state_bytes(optimizer)}
    return found


HINTS = {
    "zero1": "ZeroRedundancyOptimizer keeps this rank's shard of the state in its .optim attribute",
    "fsdp": "the state tensors are DTensors: count their .to_local() part, not their global shape",
    "ddp": "count every tensor in optimizer.state (exp_avg, exp_avg_sq and step for Adam)",
}


def diagnose(results: list[dict]) -> list[str]:
    """Problems with per-rank results of ``_run_state_bytes`` (empty when all is right)."""
    problems = []
    for strategy in STRATEGIES:
        for rank, found in enumerate(results):
            row = found[strategy]
            if isinstance(row["value"], str):
                problems.append(f"{strategy}: state_bytes returned {row['value']}; return an int")
            elif row["value"] != row["exact"]:
                problems.append(f"{strategy}, rank {rank}: returned {row['value']} bytes, this rank holds "
                                f"{row['exact']}; {HINTS[strategy]}")
            else:
                continue
            break  # one message per strategy
    return problems


def check_state_bytes(state_bytes: Callable, world_size: int = 2) -> Report:
    """Run the learner's ``state_bytes(optimizer)`` after one Adam step under DDP, ZeRO-1 and FSDP2
    on every rank; return the report."""
    report = Report()
    results = run_on_ranks(_run_state_bytes, world_size, report, kwargs=dict(state_bytes=state_bytes), timeout=120)
    if results is None:
        return report
    problems = diagnose(results)
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(f"on {world_size} ranks the count is exact under DDP, ZeRO-1 and FSDP2")
    return report
