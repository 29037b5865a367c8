"""Lesson 09's checkpoint: what to save, and a resumed run whose losses continue the unbroken one.

``train_then_resume`` trains a small DDP model without a break, then trains it again from the same
seed, saves a checkpoint on rank 0 part-way, builds everything afresh as a restarted job would,
loads the checkpoint on every rank and trains on. Each loss is the mean over all ranks' batches.
The learning rate follows the square-root scaling rule, the one suggested for Adam, with a learning-rate warm-up
from an LR scheduler that the checkpoint saves too."""

import math
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group

BATCH = 16  # samples per rank and step
BASE_LR, BASE_BATCH = 0.005, 16  # a learning rate that suits a batch of 16 samples in one process
WARMUP_STEPS = 4


def make_parts(seed: int, device: torch.device) -> tuple[DDP, torch.optim.Optimizer,
                                                         torch.optim.lr_scheduler.LRScheduler, torch.amp.GradScaler]:
    """A small classifier wrapped in DDP, its Adam optimizer, a learning-rate warm-up scheduler and a GradScaler
    (which only float16 training needs; it is saved here to show its state). The square-root scaling
    rule, for Adam: the learning rate grows with the square root of the global batch's growth,
    BASE_LR * sqrt(global batch / BASE_BATCH); the scheduler raises it to that over the first
    WARMUP_STEPS steps."""
    torch.manual_seed(seed)
    ddp_model = DDP(nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2)).to(device))
    lr = BASE_LR * math.sqrt(BATCH * dist.get_world_size() / BASE_BATCH)
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    return ddp_model, optimizer, scheduler, torch.amp.GradScaler(device.type)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same BATCH samples for a given step and rank, in any run."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, 2, generator=generator)
    return x, (x[:, 0] * x[:, 1] > 0).long()


def train_steps(ddp_model: DDP, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                scaler: torch.amp.GradScaler, steps: range) -> tuple[list[float], list[float]]:
    """Train the given steps; return each step's loss as the mean over all ranks, and its learning rate."""
    losses, lrs = [], []
    device = next(ddp_model.parameters()).device
    for step in steps:
        x, y = (t.to(device) for t in batch(step, dist.get_rank()))
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(ddp_model(x), y)
        scaler.scale(loss).backward()  # DDP averages the gradients here
        lrs.append(round(scheduler.get_last_lr()[0], 6))
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the sum of every rank's loss ...
        losses.append(round(mean.item() / dist.get_world_size(), 6))  # ... over the ranks: the global mean
    return losses, lrs


def save_training_state(path: str, ddp_model: DDP, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler,
                    next_step: int) -> None:
    """Rank 0 saves; every rank waits at the barrier until the file is complete."""
    if dist.get_rank() == 0:
        # Under DDP(torch.compile(model)), .module's keys start with "_orig_mod.": save model.state_dict().
        torch.save({"model": ddp_model.module.state_dict(),  # .module: keys without "module."
                    "optimizer": optimizer.state_dict(),  # Adam's moments and step counts
                    "scheduler": scheduler.state_dict(),  # where the learning-rate warm-up stands
                    "scaler": scaler.state_dict(),  # the loss scale and its growth tracker
                    "next_step": next_step}, path)
    dist.barrier()


def load_training_state(path: str, ddp_model: DDP, optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, scaler: torch.amp.GradScaler) -> int:
    """Every rank loads the same file; returns the step to go on from."""
    device = next(ddp_model.parameters()).device
    checkpoint = torch.load(path, map_location=device, weights_only=True)  # onto this rank's device
    ddp_model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    return checkpoint["next_step"]


def train_then_resume(rank: int, world_size: int, directory: str, steps: int = 6, save_at: int = 3) -> dict:
    """Returns {"rank", "unbroken", "resumed" and "no_optimizer_state" (the losses of each run, step by
    step; "no_optimizer_state" resumed from everything but Adam's moments and step counts), "lrs" (the
    learning rate of each step of the resumed run), "contents" (the checkpoint's parts and their
    keys), "wrapper_key" and "module_key" (the first state_dict key of the DDP wrapper and of its
    module)}."""
    if not 0 < save_at < steps:
        raise ValueError(f"save_at must lie between 0 and steps={steps} (exclusive), got {save_at}")
    path = os.path.join(directory, "checkpoint.pt")
    with process_group(rank, world_size) as device:
        unbroken, _ = train_steps(*make_parts(seed=0, device=device), range(steps))

        parts = make_parts(seed=0, device=device)
        before, lrs_before = train_steps(*parts, range(save_at))
        save_training_state(path, *parts, next_step=save_at)

        parts = make_parts(seed=1, device=device)  # a restarted job: other weights, no state
        next_step = load_training_state(path, *parts)
        after, lrs_after = train_steps(*parts, range(next_step, steps))

        fresh = make_parts(seed=1, device=device)  # the same, then Adam's moments and step counts dropped
        load_training_state(path, *fresh)
        fresh[1].state.clear()  # the learning rate, in the optimizer's param_groups, stays
        no_optimizer_state, _ = train_steps(*fresh, range(next_step, steps))

        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        contents = {part: sorted(value) if isinstance(value, dict) else value for part, value in checkpoint.items()}
        dist.barrier()  # no rank leaves while another still reads the file
        ddp_model = parts[0]
        return {"rank": rank, "unbroken": unbroken, "resumed": before + after,
                "no_optimizer_state": before + no_optimizer_state, "lrs": lrs_before + lrs_after,
                "contents": contents, "wrapper_key": next(iter(ddp_model.state_dict())),
                "module_key": next(iter(ddp_model.module.state_dict()))}
