"""Lesson 09's loop as one plain script, torch only: run it with
``torchrun --nproc-per-node 2 ddp_lib/demos/plain_train.py`` (or ``python -m ddp_lib.torchrun ...``)."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, BATCH, LR, MAX_NORM, SEED = 3, 16, 0.1, 1.0, 0
AMP_DTYPE = None  # torch.bfloat16 for bf16 autocast; torch.float16 also turns the GradScaler on
CHECKPOINT = "checkpoint.pt"  # written by rank 0, in the directory torchrun was started from


def train(rank: int, world_size: int, device: torch.device) -> None:
    torch.manual_seed(SEED)  # the same data and the same initial weights on every rank
    x = torch.randn(512, 2)
    y = (x[:, 0] * x[:, 1] > 0).long()  # two classes, by quadrant
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world_size, rank=rank, seed=SEED)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, sampler=sampler, drop_last=True)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2)).to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler(device.type, enabled=AMP_DTYPE == torch.float16)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        sums = torch.zeros(2, device=device)  # loss times samples, samples
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=AMP_DTYPE or torch.bfloat16, enabled=AMP_DTYPE is not None):
                loss = loss_fn(ddp_model(xb), yb)
            scaler.scale(loss).backward()  # DDP averages the gradients here
            scaler.unscale_(optimizer)  # clip the true, averaged gradients
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            scaler.step(optimizer)  # skipped on every rank if any gradient overflowed
            scaler.update()
            sums += torch.stack([loss.detach().float() * len(yb), torch.tensor(float(len(yb)), device=device)])
        dist.all_reduce(sums)  # the mean over all ranks' samples, not rank 0's shard only
        if rank == 0:
            print(f"epoch {epoch}: loss {(sums[0] / sums[1]).item():.4f}", flush=True)
    if rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, CHECKPOINT)
    dist.barrier()  # no rank reads the checkpoint before rank 0 has written it


def main() -> None:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # device_id: this rank's GPU for nccl's collectives, dist.barrier() included
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    try:
        train(rank, world_size, device)  # DDP's model is freed on return, while the group still exists
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
