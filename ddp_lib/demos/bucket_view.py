"""Lesson 08: what ``gradient_as_bucket_view=True`` saves in a DDP step.

By default DDP copies each gradient into its bucket before the all-reduce, and the averaged bucket
back into ``p.grad`` after it. With ``gradient_as_bucket_view=True`` each ``p.grad`` is a view into
its bucket from the first backward on, so the copy back goes, and the peak memory, from
backward to ``optimizer.step()``, drops by about one copy of the gradients. The copy in goes too only when
``zero_grad(set_to_none=False)`` keeps those views: the default ``zero_grad()`` sets ``p.grad`` to
None, backward makes a new gradient, and DDP copies it into the bucket again
(``copies_in_backward`` counts them). Four copies of the same MLP are stepped in
turn, round by round, after a barrier each: no DDP ("local"), DDP with copies, DDP with views and the
default ``zero_grad()``, and DDP with views and ``zero_grad(set_to_none=False)``.

    python -m ddp_lib.demos.bucket_view > ddp_lib/demos/recorded/bucket_view.json   # a new kept run
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.bench.ranks import DDP_BATCH, DDP_WIDTHS
from ddp_lib.process_group import process_group
from ddp_lib.workers.shared import make_mlp

KEPT_RUN = Path(__file__).with_name("recorded") / "bucket_view.json"
WAYS = ("local", "DDP, copies", "DDP, views", "DDP, views kept")
SET_TO_NONE = {"local": True, "DDP, copies": True, "DDP, views": True, "DDP, views kept": False}


def grads_are_views(model: nn.Module) -> bool:
    """True when every gradient is a view into another tensor (its bucket), False when none is."""
    views = [p.grad._base is not None for p in model.parameters()]
    if any(views) != all(views):
        raise RuntimeError(f"some gradients are views and some are not: {views}")
    return all(views)


def bucket_view_steps(rank: int, world_size: int, rounds: int = 15, seed: int = 0) -> dict:
    """Returns {"step_ms" ({way: step times in ms, one per round}), "views" ({DDP way: gradients
    are views into the bucket after the timed steps})}. One bucket (``bucket_cap_mb=25``), as in
    the lesson's DDP step benchmark."""
    with process_group(rank, world_size):
        models = {"local": make_mlp(seed, DDP_WIDTHS)}
        for way, as_view in (("DDP, copies", False), ("DDP, views", True), ("DDP, views kept", True)):
            models[way] = DDP(make_mlp(seed, DDP_WIDTHS), bucket_cap_mb=25, gradient_as_bucket_view=as_view)
        optimizers = {way: torch.optim.SGD(m.parameters(), lr=0.01) for way, m in models.items()}
        g = torch.Generator().manual_seed(seed + rank)
        x, y = torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=g), torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=g)
        step_ms: dict[str, list[float]] = {way: [] for way in WAYS}
        order_gen = torch.Generator().manual_seed(seed)  # the same orders on every rank
        for round_ in range(rounds + 2):  # two warm-up rounds: DDP rebuilds its buckets after step 1
            # A new random order each round, so that no way always follows the same other way.
            order = [WAYS[i] for i in torch.randperm(len(WAYS), generator=order_gen).tolist()]
            for way in order:
                dist.barrier()
                start = time.perf_counter()
                optimizers[way].zero_grad(set_to_none=SET_TO_NONE[way])
                nn.functional.mse_loss(models[way](x), y).backward()
                optimizers[way].step()
                if round_ >= 2:
                    step_ms[way].append(round((time.perf_counter() - start) * 1e3, 2))
        slowest = torch.tensor([step_ms[way] for way in WAYS], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # each round's slowest rank
        return {"step_ms": {way: [round(t, 2) for t in row] for way, row in zip(WAYS, slowest.tolist())},
                "views": {way: grads_are_views(models[way]) for way in WAYS[1:]}}


def copies_in_backward(rank: int, world_size: int, steps: int = 3) -> dict:
    """Returns {setting: {"into the bucket": n, "back to p.grad": n}}: the gradient copies DDP made
    in the last backward, counted by the profiler, for DDP with copies, with views and the default
    ``zero_grad()``, and with views and ``zero_grad(set_to_none=False)``. The Reducer labels its
    copy in (the gradient times 1/world_size, written into the bucket) ``reducer::mul_out`` and its
    copy back ``reducer::copy_bucket_to_grad``. Meant for 1 rank (``run_ranks(copies_in_backward, 1)``):
    the profiler's own log lines then stay in the rank's output. A small MLP with 4 parameters."""
    from torch.profiler import ProfilerActivity, profile

    counts = {}
    with process_group(rank, world_size):
        for setting, as_view, set_to_none in (("copies", False, True), ("views, zero_grad()", True, True),
                                              ("views, zero_grad(set_to_none=False)", True, False)):
            model = DDP(make_mlp(0, (16, 32, 4)), gradient_as_bucket_view=as_view)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
            for _ in range(steps):  # DDP rebuilds its buckets after step 1: count the last step
                optimizer.zero_grad(set_to_none=set_to_none)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    model(x).sum().backward()
                optimizer.step()
            calls = {e.key: e.count for e in prof.key_averages()}
            counts[setting] = {"into the bucket": calls.get("torch::distributed::reducer::mul_out", 0),
                               "back to p.grad": calls.get("torch.distributed.ddp.reducer::copy_bucket_to_grad", 0)}
    return counts


def kept_run() -> dict:
    return json.loads(KEPT_RUN.read_text())


def main() -> int:
    from ddp_lib.launch import run_ranks

    rank0 = run_ranks(bucket_view_steps, 2, show_output=False)[0]
    print(json.dumps({**rank0, "cpu_count": os.cpu_count(), "load_average": round(os.getloadavg()[0], 1)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
