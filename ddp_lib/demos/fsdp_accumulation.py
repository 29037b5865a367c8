"""Lesson 10's gradient accumulation under FSDP2: one step of two micro-batches, three ways, with the
all-gathers and reduce-scatters of that step counted from torch.profiler's records.

- every micro-batch reduce-scatters its gradients, as without any setting;
- ``set_requires_gradient_sync(False)`` on all micro-batches but the last: FSDP2's ``no_sync``;
- and ``set_reshard_after_backward(False)`` as well: the weights stay gathered between micro-batches."""

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from ddp_lib.workers.beyond_ddp import batch, local, make_deep_mlp, wrap

WAYS = {"reduce-scatter every micro-batch": (False, False),
        "set_requires_gradient_sync(False)": (True, False),
        "  and set_reshard_after_backward(False)": (True, True)}
KINDS = {"c10d::_allgather_base_": "all_gather", "c10d::_reduce_scatter_base_": "reduce_scatter"}


def _step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, rank: int, micro_batches: int,
          no_sync: bool, keep_gathered: bool, batch_size: int, width: int) -> None:
    optimizer.zero_grad()
    for k in range(micro_batches):
        last = k == micro_batches - 1
        model.set_requires_gradient_sync(last or not no_sync)  # reduce-scatter only after the last
        model.set_reshard_after_backward(last or not keep_gathered)  # keep the weights gathered until the last
        x, y = batch(step * micro_batches + k, rank, batch_size, width)
        (nn.functional.mse_loss(model(x), y) / micro_batches).backward()
    optimizer.step()


def accumulation_counts(rank: int, world_size: int, micro_batches: int = 2, width: int = 256, layers: int = 4,
                        batch_size: int = 8) -> dict:
    """For each way of WAYS: {"all_gather": n, "reduce_scatter": n} in the second step (the first sets
    up), and "max_diff", the largest difference of this rank's parameter shards from the first way's
    after two steps. Call inside a process group."""
    result, first = {}, None
    for way, (no_sync, keep_gathered) in WAYS.items():
        model, optimizer = wrap(make_deep_mlp(width, layers), "fsdp", 1e-3)
        _step(model, optimizer, 0, rank, micro_batches, no_sync, keep_gathered, batch_size, width)
        with profile(activities=[ProfilerActivity.CPU]) as trace:
            _step(model, optimizer, 1, rank, micro_batches, no_sync, keep_gathered, batch_size, width)
        counts = {"all_gather": 0, "reduce_scatter": 0}
        for event in trace.events():
            if event.name in KINDS:
                counts[KINDS[event.name]] += 1
        params = torch.cat([local(p).detach().flatten() for p in model.parameters()])
        first = params if first is None else first
        result[way] = {**counts, "max_diff": (params - first).abs().max().item()}
    return {"rank": rank, "micro_batches": micro_batches, "ways": result}
