"""A complete small training job under DDP: sharded data, averaged loss metrics, a progress
line on rank 0, checkpoints on rank 0 and resume from the latest one.

    spawn(train, 2, args=(8, 16, 0.1, 0))          # epochs, batch_size per rank, lr, seed
    torchrun --nproc-per-node 2 -m ddp_lib run train --epochs 8 --json
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddp_lib.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ddp_lib.data import make_moons
from ddp_lib.models import param_checksum
from ddp_lib.moons_model import MoonsNet, to_torch_sync_batchnorm
from ddp_lib.process_group import process_group

ORDER_SHOWN = 6  # how many sample indices per epoch the result reports (enough to see a pattern)


def progress_line(epoch: int, epochs: int, loss: float, width: int = 20) -> str:
    """One text progress bar for a finished epoch, e.g. ``epoch  3/8 [#######-----] loss 0.4213``."""
    done = round(width * epoch / epochs)
    return f"epoch {epoch:>2}/{epochs} [{'#' * done}{'-' * (width - done)}] loss {loss:.4f}"


def train(rank: int, world_size: int, epochs: int = 8, batch_size: int = 16, lr: float = 0.1,
          seed: int = 0, checkpoint_dir: str = "", resume: int = 0, set_epoch: int = 1,
          norm: str = "none", fail_at_epoch: int = 0) -> dict:
    """Train MoonsNet for ``epochs`` epochs at ``batch_size`` samples per rank per step.

    checkpoint_dir: where rank 0 saves a checkpoint after every epoch ("" for none).
    resume: 1 to continue from the latest checkpoint there, if any.
    set_epoch: 0 to forget ``sampler.set_epoch`` (to show what goes wrong).
    norm: "none", "batch" or "sync" (see MoonsNet).
    fail_at_epoch: the last rank raises when it reaches this epoch (1-based), but only on a
    first attempt (TORCHELASTIC_RESTART_COUNT 0); 0 never fails.
    Returns {"rank", "attempt" (torchrun's restart count), "start_epoch", "losses" (one per epoch
    so far, averaged over all ranks), "order" (the first sample indices this rank read in each
    epoch it trained), "checksum", "params" (all parameters, flattened)}.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)  # the same initial weights everywhere (DDP would broadcast them anyway)
        dataset = make_moons()
        # Each rank reads its own 1/world_size of a permutation that depends on seed + epoch only.
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

        model = MoonsNet(norm=norm)
        if norm == "sync" and device.type == "cuda":
            model = to_torch_sync_batchnorm(model)
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

        start_epoch, losses = 0, []
        path = latest_checkpoint(checkpoint_dir) if resume else None
        if path:
            # map_location: tensors saved from rank 0's device land on this rank's device.
            state = load_checkpoint(path, map_location=device)
            model.load_state_dict(state["model"])  # before DDP, which then broadcasts rank 0's copy
            optimizer.load_state_dict(state["optimizer"])
            start_epoch, losses = state["epoch"], list(state["losses"])
            if rank == 0:
                print(f"resumed from the checkpoint of epoch {start_epoch}", flush=True)
        ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        loss_fn = nn.CrossEntropyLoss()

        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        order = []
        for epoch in range(start_epoch, epochs):
            if epoch + 1 == fail_at_epoch and restart == 0 and rank == world_size - 1:
                raise RuntimeError(f"injected failure at epoch {epoch + 1} on rank {rank}")
            if set_epoch:
                sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            order.append(list(sampler)[:ORDER_SHOWN])
            totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, samples
            ddp_model.train()
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = loss_fn(ddp_model(x), y)
                loss.backward()  # gradients are averaged across ranks here
                optimizer.step()
                totals[0] += loss.detach().double() * len(y)
                totals[1] += len(y)
            # The epoch's loss over every rank's samples, not just this rank's shard.
            dist.all_reduce(totals)
            losses.append(round((totals[0] / totals[1]).item(), 6))
            if rank == 0:
                print(progress_line(epoch + 1, epochs, losses[-1]), flush=True)
                if checkpoint_dir:
                    # The unwrapped module: keys without "module.", loadable with or without DDP.
                    save_checkpoint(checkpoint_dir, epoch + 1, {
                        "epoch": epoch + 1, "model": ddp_model.module.state_dict(),
                        "optimizer": optimizer.state_dict(), "losses": losses})
            if checkpoint_dir:
                dist.barrier()  # nobody reads or crashes past a checkpoint rank 0 has not finished

        params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
        return {"rank": rank, "attempt": restart, "start_epoch": start_epoch, "losses": losses, "order": order,
                "checksum": param_checksum(model), "params": params.tolist()}
