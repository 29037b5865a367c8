"""Lesson 09's loop as one plain script, torch only: run it with
``torchrun --nproc-per-node 2 ddp_lib/demos/plain_train.py`` (or ``python -m ddp_lib.torchrun ...``).
Add ``--resume`` to go on from the checkpoint a run left, ``--epochs N`` to stop after epoch N."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS, BATCH, LR, MOMENTUM, MAX_NORM, SEED, WARMUP_STEPS = 3, 16, 0.3, 0.9, 1.0, 0, 10
AMP_DTYPE = None  # torch.bfloat16 for bf16 autocast; torch.float16 also turns the GradScaler on
COMPILE = False  # True: torch.compile the model (inductor; its first step compiles, slowly)
CHECKPOINT = "checkpoint.pt"  # written by rank 0, in the directory torchrun was started from


def train(rank: int, world_size: int, device: torch.device, epochs: int, resume: bool) -> None:
    torch.manual_seed(SEED)  # the same data and the same initial weights on every rank
    x = torch.randn(512 + 101, 2)
    y = (x[:, 0] * x[:, 1] > 0).long()  # two classes, by quadrant
    held_out = TensorDataset(x[512:], y[512:])  # 101 samples: not a multiple of the ranks
    x, y = x[:512], y[:512]
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world_size, rank=rank, seed=SEED)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, sampler=sampler, drop_last=True)
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2)).to(device)
    # [torch.compile with DDP] compile the module, then wrap it. The checkpoint saves model.state_dict(),
    # whose keys torch.compile leaves unchanged; ddp_model.module's would start with "_orig_mod.".
    ddp_model = DDP(torch.compile(model) if COMPILE else model,
                    device_ids=[device.index] if device.type == "cuda" else None)
    torch.manual_seed(SEED + rank)  # from here on (dropout, augmentation), each rank draws its own numbers
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR, momentum=MOMENTUM)  # buffers: in the checkpoint
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))
    scaler = torch.amp.GradScaler(device.type, enabled=AMP_DTYPE == torch.float16)
    loss_fn = nn.CrossEntropyLoss()
    start_epoch = 0
    if resume:  # every rank loads the file rank 0 wrote
        state = torch.load(CHECKPOINT, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        start_epoch = state["next_epoch"]
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        sums = torch.zeros(2, device=device)  # loss times samples, samples
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad(set_to_none=True)
            # [Mixed precision] AMP_DTYPE = None turns autocast off
            with torch.autocast(device.type, dtype=AMP_DTYPE, enabled=AMP_DTYPE is not None):
                loss = loss_fn(ddp_model(xb), yb)
            scaler.scale(loss).backward()  # DDP averages the gradients here
            scaler.unscale_(optimizer)  # [Gradient clipping] clip the true, averaged gradients
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)  # inf or nan on an fp16 overflow: step skipped
            scaler.step(optimizer)  # [fp16 and the GradScaler] skipped on every rank on an overflow
            scaler.update()
            scheduler.step()  # [folded: a skipped step] warm-up, after scaler.step; a skipped step still counts
            sums += torch.stack([loss.detach().float() * len(yb), torch.tensor(float(len(yb)), device=device)])
        dist.all_reduce(sums)  # [Logging on rank 0] sums of (loss x n, n): the exact mean over all ranks' samples
        if rank == 0:
            print(f"epoch {epoch}: loss {(sums[0] / sums[1]).item():.4f}", flush=True)
            # save everything the next epoch needs, to a temporary name, then rename: a crash mid-save
            # leaves the last whole checkpoint
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                        "next_epoch": epoch + 1}, CHECKPOINT + ".tmp")
            os.replace(CHECKPOINT + ".tmp", CHECKPOINT)
        dist.barrier()  # every rank leaves the epoch only once the file is complete
    accuracy = evaluate(model, held_out, rank, world_size, device)  # every rank calls it: it all-reduces
    if rank == 0:
        print(f"held-out accuracy {accuracy:.4f}", flush=True)


def evaluate(model: nn.Module, dataset: TensorDataset, rank: int, world_size: int,
             device: torch.device | None = None) -> float:
    """Accuracy over every sample once: each rank scores every world_size-th sample from its rank on, as
    ``Subset(dataset, range(rank, len(dataset), world_size))`` would (no padding, so no duplicate), in one
    batch, then the ranks sum (correct, counted). First every rank takes rank 0's buffers (batch norm's
    running statistics, which each rank's last training forward updated from its own batch), so that all
    ranks evaluate one model, the one rank 0 saves. ``device``: where the model is; None reads it from the
    model's parameters, so ``evaluate(model, dataset, rank, world_size)`` is exercise 1's signature."""
    if device is None:
        device = next(model.parameters()).device
    for buffer in model.buffers():  # none in this script's model; one broadcast each in a model with batch norm
        dist.broadcast(buffer, src=0)
    x, y = (t[rank::world_size].to(device) for t in dataset.tensors)
    model.eval()
    with torch.no_grad():
        counts = torch.stack([(model(x).argmax(1) == y).float().sum(), torch.tensor(float(len(y)), device=device)])
    model.train()
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--resume", action="store_true", help=f"go on from {CHECKPOINT}")
    options = parser.parse_args(argv)  # None: the command line
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # device_id: this rank's GPU for nccl's collectives, dist.barrier() included
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    try:
        # DDP's model is freed on return, while the group still exists
        train(rank, world_size, device, options.epochs, options.resume)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
