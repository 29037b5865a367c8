"""Lesson 09's checkpoint: what to save, and a resumed run whose losses continue the unbroken one.

``train_then_resume`` trains a small DDP model without a break, then trains it again from the same
seed, saves a checkpoint on rank 0 part-way, builds everything afresh as a restarted job would,
loads the checkpoint on every rank and trains on. Each loss is the mean over all ranks' batches."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group


def make_parts(seed: int) -> tuple[DDP, torch.optim.Optimizer, torch.amp.GradScaler]:
    """A small classifier wrapped in DDP, its Adam optimizer and a GradScaler (which only
    float16 training needs; it is saved here to show its state)."""
    torch.manual_seed(seed)
    ddp_model = DDP(nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2)))
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=0.01)
    return ddp_model, optimizer, torch.amp.GradScaler("cpu")


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same 16 samples for a given step and rank, in any run."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 2, generator=generator)
    return x, (x[:, 0] * x[:, 1] > 0).long()


def train_steps(ddp_model: DDP, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                steps: range) -> list[float]:
    """Train the given steps; return each step's loss as the mean over all ranks."""
    losses = []
    for step in steps:
        x, y = batch(step, dist.get_rank())
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(ddp_model(x), y)
        scaler.scale(loss).backward()  # DDP averages the gradients here
        scaler.step(optimizer)
        scaler.update()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # the sum of every rank's loss ...
        losses.append(round(mean.item() / dist.get_world_size(), 6))  # ... over the ranks: the global mean
    return losses


def save_checkpoint(path: str, ddp_model: DDP, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler, next_step: int) -> None:
    """Rank 0 saves; every rank waits at the barrier until the file is complete."""
    if dist.get_rank() == 0:
        torch.save({"model": ddp_model.module.state_dict(),  # .module: keys without "module."
                    "optimizer": optimizer.state_dict(),  # Adam's moments and step counts
                    "scaler": scaler.state_dict(),  # the loss scale and its growth tracker
                    "next_step": next_step}, path)
    dist.barrier()


def load_checkpoint(path: str, ddp_model: DDP, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler) -> int:
    """Every rank loads the same file; returns the step to go on from."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # on a GPU: the rank's device
    ddp_model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    return checkpoint["next_step"]


def train_then_resume(rank: int, world_size: int, directory: str, steps: int = 6, save_at: int = 3) -> dict:
    """Returns {"rank", "unbroken", "resumed" and "weights_only" (the losses of each run, step by
    step; "weights_only" resumed with the model's weights alone, Adam's state left empty),
    "contents" (the checkpoint's parts and their keys), "wrapper_key" and "module_key" (the first
    state_dict key of the DDP wrapper and of its module)}."""
    if not 0 < save_at < steps:
        raise ValueError(f"save_at must lie between 0 and steps={steps} (exclusive), got {save_at}")
    path = os.path.join(directory, "checkpoint.pt")
    with process_group(rank, world_size):
        unbroken = train_steps(*make_parts(seed=0), range(steps))

        ddp_model, optimizer, scaler = make_parts(seed=0)
        before = train_steps(ddp_model, optimizer, scaler, range(save_at))
        save_checkpoint(path, ddp_model, optimizer, scaler, next_step=save_at)

        ddp_model, optimizer, scaler = make_parts(seed=1)  # a restarted job: other weights, no state
        next_step = load_checkpoint(path, ddp_model, optimizer, scaler)
        after = train_steps(ddp_model, optimizer, scaler, range(next_step, steps))

        ddp_model, optimizer, scaler = make_parts(seed=1)  # the same, but only the weights loaded
        ddp_model.module.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["model"])
        weights_only = train_steps(ddp_model, optimizer, scaler, range(next_step, steps))

        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        contents = {part: sorted(value) if isinstance(value, dict) else value for part, value in checkpoint.items()}
        dist.barrier()  # no rank leaves while another still reads the file
        return {"rank": rank, "unbroken": unbroken, "resumed": before + after,
                "weights_only": before + weights_only, "contents": contents,
                "wrapper_key": next(iter(ddp_model.state_dict())),
                "module_key": next(iter(ddp_model.module.state_dict()))}
