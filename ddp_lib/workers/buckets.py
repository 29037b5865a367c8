"""Lesson 04 workers on how gradients travel: DDP from scratch against torch's DDP, how many
all-reduces bucket_cap_mb gives, and a timeline of backward against communication."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddp_lib import scratch_ddp
from ddp_lib.process_group import process_group
from ddp_lib.workers.gradients import (
    LR,
    flat_grads,
    flat_params,
    gather_flat,
    make_mlp,
    rank_batch,
    wrap_ddp,
)

WIDE = (64, 128, 128, 128, 128, 8)  # weights of 32, 64, 64, 64 and 4 KiB
TIMELINE_WIDTHS = (256,) * 8  # seven 256 KiB weights: backward and all-reduces take visible time


def scratch_vs_torch(rank: int, world_size: int, way: str = "buckets", steps: int = 4,
                     bucket_cap_mb: float = 0.001, seed: int = 0, per_rank_batch: int = 4) -> dict:
    """Train the same model with torch's DDP and with scratch_ddp ``way`` side by side for ``steps``
    steps. Returns the largest difference of gradients and of parameters over all steps, the
    all-reduces per step of the scratch version, and whether all ranks ended equal."""
    with process_group(rank, world_size) as device:
        # Different starting weights per rank: both must broadcast rank 0's.
        reference = wrap_ddp(make_mlp(seed + rank).to(device), device, bucket_cap_mb=bucket_cap_mb)
        options = {"bucket_cap_mb": bucket_cap_mb} if way in ("buckets", "torch") else {}
        if way == "torch" and device.type == "cuda":
            options["device_ids"] = [device.index]
        ours = scratch_ddp.make(way, make_mlp(seed + rank).to(device), **options)
        optimizers = [torch.optim.SGD(m.parameters(), lr=LR) for m in (reference, ours)]
        grad_diff = param_diff = 0.0
        calls = []
        for step in range(steps):
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, per_rank_batch, seed))
            before = getattr(ours, "allreduce_calls", 0)  # the hook-based ways start them during backward
            for model, optimizer in zip((reference, ours), optimizers):
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
            ours.finish_gradient_sync()
            calls.append(getattr(ours, "allreduce_calls", 0) - before)
            grad_diff = max(grad_diff, (flat_grads(reference) - flat_grads(ours)).abs().max().item())
            for optimizer in optimizers:
                optimizer.step()
            param_diff = max(param_diff, (flat_params(reference) - flat_params(ours)).abs().max().item())
        everyone = gather_flat(flat_params(ours).to(device))
        return {"way": way, "max_grad_diff": grad_diff, "max_param_diff": param_diff,
                "allreduces_per_step": calls, "ranks_equal": all(torch.equal(everyone[0], p) for p in everyone)}


def _recording_hook(events: list[tuple], clock):
    """The default all-reduce comm hook, recording (bucket index, bytes, start, end) per call."""
    def hook(state, bucket):
        start = clock()
        nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
        future = default_hooks.allreduce_hook(state, bucket)

        def done(fut):
            events.append((bucket.index(), nbytes, start, clock()))
            return fut.value()
        return future.then(done)
    return hook


def count_allreduces(rank: int, world_size: int, bucket_cap_mb: float = 25.0, steps: int = 3) -> dict:
    """Train WIDE under DDP with ``bucket_cap_mb``; return the all-reduces of each step and the
    bucket sizes in bytes of the last step (after DDP rebuilt its buckets in step 0)."""
    with process_group(rank, world_size) as device:
        model = wrap_ddp(make_mlp(0, WIDE).to(device), device, bucket_cap_mb=bucket_cap_mb)
        events: list[tuple] = []
        model.register_comm_hook(None, _recording_hook(events, time.perf_counter))
        per_step = []
        for step in range(steps):
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, 8, widths=WIDE))
            before = len(events)
            nn.functional.mse_loss(model(x), y).backward()
            per_step.append(len(events) - before)
        last = sorted(events[-per_step[-1]:])
        return {"allreduces_per_step": per_step, "bucket_bytes": [nbytes for _, nbytes, _, _ in last]}


def backward_timeline(rank: int, world_size: int, bucket_cap_mb: float = 0.3, warmup: int = 2,
                      per_rank_batch: int = 256) -> dict:
    """Record one DDP backward: when each weight's gradient was ready and when each bucket's
    all-reduce started and ended, in ms from the start of backward (one clock per rank)."""
    with process_group(rank, world_size) as device:
        model = wrap_ddp(make_mlp(0, TIMELINE_WIDTHS).to(device), device, bucket_cap_mb=bucket_cap_mb)
        clock = time.perf_counter
        events: list[tuple] = []
        ready: list[tuple[str, float]] = []
        model.register_comm_hook(None, _recording_hook(events, clock))
        for name, p in model.module.named_parameters():
            if name.endswith("weight"):
                p.register_post_accumulate_grad_hook(lambda _p, name=name: ready.append((name, clock())))
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=TIMELINE_WIDTHS))
        for _ in range(warmup + 1):  # the last iteration is the one recorded
            events.clear()
            ready.clear()
            loss = nn.functional.mse_loss(model(x), y)
            start = clock()
            loss.backward()
            end = clock()

        def ms(t: float) -> float:
            return round(1000 * (t - start), 3)
        return {
            "backward_ms": ms(end),
            "grad_ready": [(name, ms(t)) for name, t in ready],
            "allreduces": [{"bucket": i, "bytes": nbytes, "start": ms(s), "end": ms(e)}
                           for i, nbytes, s, e in sorted(events, key=lambda ev: ev[2])],
        }
