"""Lesson 05's training loop under DDP (for your own model, copy ``template.py`` instead): generated data,
a small classifier, sharded batches, the loss averaged over every rank, a checkpoint per epoch on rank 0,
and a resume from the newest.

    run_ranks(train, 2, kwargs=dict(epochs=8, batch_size=16, lr=0.1, seed=0))
    torchrun --nproc-per-node 2 -m ddp_lib run train --epochs 8 --json

It needs this file, ``process_group.py`` and ``shared.py``. ``train``
comes first, then its parts: one epoch of steps, the checkpoints, the model. The lesson's own
switches (a crash on purpose, no set_epoch, a tqdm bar, keep_last) wrap these parts in
``ddp_lib/demos/training_runs.py`` (``train_with_switches``, which ``python -m ddp_lib run train`` starts).
"""

from __future__ import annotations

import os
import re
from typing import Literal, get_args

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group, wrap_ddp
    from ddp_lib.workers.shared import make_moons, param_checksum
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group, wrap_ddp
    from shared import make_moons, param_checksum

Norm = Literal["none", "batch", "sync"]
NORMS = get_args(Norm)


def train(rank: int, world_size: int, epochs: int = 8, batch_size: int = 16, lr: float = 0.1,
          seed: int = 0, checkpoint_dir: str | None = None, resume: bool = False, norm: Norm = "none",
          warmup_steps: int = 0) -> dict:
    """Train MoonsNet with SGD (momentum 0.9) under DDP.

    Args:
        epochs: number of epochs to reach, counting those already in a resumed checkpoint.
        batch_size: samples per rank per step (global batch = world_size x this).
        lr: learning rate.
        seed: seed of the initial weights and of the shuffle.
        checkpoint_dir: directory where rank 0 saves a checkpoint after every epoch (None or "": none).
        resume: continue from the newest checkpoint in checkpoint_dir (none yet: say so, start at 1).
        norm: "none", "batch" (BatchNorm1d, this rank's statistics) or "sync" (statistics of the global batch).
        warmup_steps: raise the learning rate linearly from lr / warmup_steps to lr over this many steps
            (0: none), as the template's ``--warmup-steps`` does (:func:`warmup_factor`).

    Returns {"rank", "start_epoch", "losses" (one per epoch so far, averaged over all ranks),
    "checksum", "params" (all parameters, flattened)}.
    """
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs a checkpoint_dir to resume from")
    with process_group(rank, world_size) as device:
        model, optimizer, sampler, loader = make_job(rank, world_size, device, batch_size, lr, seed, norm)
        start_epoch, losses = resume_from(checkpoint_dir, model, optimizer, device, rank) if resume else (0, [])
        ddp_model = wrap_ddp(model, device)  # after the load: DDP broadcasts rank 0's weights

        for epoch in range(start_epoch, epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            losses.append(train_epoch(ddp_model, loader, optimizer, epoch, lr, warmup_steps))
            if rank == 0:
                print(progress_line(epoch + 1, epochs, losses[-1]), flush=True)
                if checkpoint_dir:
                    # The unwrapped module: keys without "module.", loadable with or without DDP.
                    save_epoch_file(checkpoint_path(checkpoint_dir, epoch + 1), {
                        "epoch": epoch + 1, "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(), "losses": losses})
            if checkpoint_dir:
                dist.barrier()  # past it, every rank knows this epoch's file is complete

        params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
        return {"rank": rank, "start_epoch": start_epoch, "losses": losses, "checksum": param_checksum(model),
                "params": params.tolist()}


def make_job(rank: int, world_size: int, device: torch.device, batch_size: int, lr: float, seed: int,
             norm: Norm) -> tuple[nn.Module, torch.optim.Optimizer, DistributedSampler, DataLoader]:
    """The model on ``device``, its optimizer, and this rank's sampler and loader."""
    torch.manual_seed(seed)  # the same initial weights everywhere (DDP would broadcast them anyway)
    dataset = make_moons()
    # Each rank reads its own 1/world_size of a permutation that depends on seed + epoch only.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    model = MoonsNet(norm=norm)
    if norm == "sync" and device.type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # on a GPU, torch's own
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return model, optimizer, sampler, loader


def warmup_factor(step: int, warmup_steps: int) -> float:
    """The share of the full learning rate at optimizer step ``step`` (from 0) of a linear warm-up over
    ``warmup_steps`` steps: 1 / warmup_steps at step 0, rising linearly to 1 at step ``warmup_steps``.
    The template's warm-up, torch's ``LinearLR(optimizer, 1 / warmup_steps, total_iters=warmup_steps)``,
    gives the same rates."""
    start = 1 / warmup_steps
    return start + (1 - start) * min(step, warmup_steps) / warmup_steps


def train_epoch(ddp_model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, epoch: int,
                lr: float, warmup_steps: int = 0) -> float:
    """One epoch of steps; returns its mean loss over every rank's samples."""
    device = next(ddp_model.parameters()).device
    loss_fn = nn.CrossEntropyLoss()
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, samples
    ddp_model.train()
    for step, (x, y) in enumerate(loader, start=epoch * len(loader)):
        if warmup_steps:
            # From the global step alone, so a resumed job continues the same schedule.
            for group in optimizer.param_groups:
                group["lr"] = lr * warmup_factor(step, warmup_steps)
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(x), y)
        loss.backward()  # gradients are averaged across ranks here
        optimizer.step()
        totals[0] += loss.detach().double() * len(y)
        totals[1] += len(y)
    dist.all_reduce(totals)  # the epoch's loss over every rank's samples, not just this rank's shard
    return round((totals[0] / totals[1]).item(), 6)


def progress_line(epoch: int, epochs: int, loss: float, width: int = 20) -> str:
    """One text progress bar for a finished epoch, e.g. ``epoch  3/8 [#######-----] loss 0.4213``."""
    done = round(width * epoch / epochs)
    return f"epoch {epoch:>2}/{epochs} [{'#' * done}{'-' * (width - done)}] loss {loss:.4f}"


# ---- checkpoints: one file per epoch, epoch_001.pt, epoch_002.pt, ...

def checkpoint_path(directory: str, epoch: int) -> str:
    """The file name of the checkpoint taken after ``epoch`` completed epochs."""
    return os.path.join(directory, f"epoch_{epoch:03d}.pt")


def save_epoch_file(path: str, state: dict) -> None:
    """Write ``state`` so that ``path`` always holds a whole checkpoint, or none."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"  # in the same folder: os.replace is then a rename on one filesystem
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename, so a power cut cannot leave an empty file
    os.replace(tmp, path)  # atomic: a crash before it leaves only the .tmp file, which no listing names


def list_checkpoints(directory: str | None) -> list[str]:
    """Checkpoint file names in ``directory``, oldest epoch first (names only, no paths)."""
    if not directory or not os.path.isdir(directory):
        return []
    epochs = {name: int(m.group(1)) for name in os.listdir(directory) if (m := re.fullmatch(r"epoch_(\d+)\.pt", name))}
    return sorted(epochs, key=epochs.get)  # by number: epoch_1000.pt comes after epoch_999.pt


def latest_checkpoint(directory: str | None) -> str | None:
    """The path of the checkpoint with the highest epoch in ``directory``, or None."""
    names = list_checkpoints(directory)
    return os.path.join(directory, names[-1]) if names else None


def load_epoch_file(path: str, parts: dict, device: torch.device) -> tuple[int, list]:
    """Load ``path`` into each of ``parts`` (model, optimizer); return (epochs done, losses)."""
    # map_location: tensors saved from rank 0's device land on this rank's; weights_only: tensors
    # and plain data only, never code the file names.
    state = torch.load(path, map_location=device, weights_only=True)
    for name, part in parts.items():
        part.load_state_dict(state[name])  # the model before DDP, which then broadcasts rank 0's copy
    return state["epoch"], list(state["losses"])


def resume_from(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
                rank: int) -> tuple[int, list]:
    """(epochs done, losses) of the newest checkpoint in ``directory``, loaded into the model and the
    optimizer; (0, []) if there is none yet, as on the first attempt of a job torchrun may restart."""
    path = latest_checkpoint(directory)
    if path is None:
        if rank == 0:
            print("no checkpoint to resume from yet: starting at epoch 1", flush=True)
        return 0, []
    start_epoch, losses = load_epoch_file(path, {"model": model, "optimizer": optimizer}, device)
    if rank == 0:
        print(f"resumed from the checkpoint of epoch {start_epoch}", flush=True)
    return start_epoch, losses


# ---- the model

class MoonsNet(nn.Module):
    """Linear(2, hidden) -> [norm] -> ReLU -> Linear(hidden, 2). ``norm`` is "none", "batch"
    (BatchNorm1d, statistics of this rank's batch) or "sync" (statistics of the global batch)."""

    def __init__(self, hidden: int = 32, norm: Norm = "none") -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.fc1 = nn.Linear(2, hidden)
        self.norm = {"none": nn.Identity(), "batch": nn.BatchNorm1d(hidden),
                     "sync": AllReduceBatchNorm1d(hidden)}[norm]
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.norm(self.fc1(x))))


class AllReduceBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch (all ranks together),
    the same computation as ``nn.SyncBatchNorm``, written with a differentiable all-reduce.
    A teaching stand-in, not for inputs far from zero: its sums of squares then lose the variance."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        channels = x.shape[1]
        count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        # Sum, sum of squares and count from every rank in one all-reduce; its backward is an
        # all-reduce too, so each rank's gradient includes how its samples moved the statistics.
        stats = dist_fn.all_reduce(torch.cat([x.sum(0), (x * x).sum(0), count]))
        total = stats[-1]
        mean = stats[:channels] / total
        var = stats[channels:2 * channels] / total - mean * mean
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * total / (total - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
