"""Lesson 05's plain-torch loop under DDP, as its diff writes it: the one-process loop plus the lines marked ``+``.

Only torch, the half-moons data and ``MoonsNet``: gloo on the CPU, as the diff writes it. It runs under any
launcher that passes ``rank`` and ``world_size`` and sets ``MASTER_ADDR`` and ``MASTER_PORT``.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm

from ddp_lib.workers.shared import make_moons
from ddp_lib.workers.train import MoonsNet


def diff_loop(rank: int, world_size: int, epochs: int = 3, checkpoint: str = "last.pt",
              progress: bool = False) -> list[float]:
    """The diff's loop: each epoch's loss over all ranks, printed by rank 0, which saves ``checkpoint``
    (model, optimizer and epoch).
    With ``progress``, rank 0 alone also draws a tqdm bar over each epoch's batches."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # MASTER_ADDR, MASTER_PORT from the launcher
    device = torch.device("cpu")
    torch.manual_seed(0)  # the same first weights on every rank (DDP would broadcast rank 0's anyway)
    dataset = make_moons()
    model = MoonsNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = DistributedSampler(dataset, seed=0)  # rank and world size from the group
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    ddp_model = DDP(model)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        totals = torch.zeros(2, dtype=torch.float64, device=device)
        for x, y in tqdm(loader, disable=not progress or dist.get_rank() != 0):  # the other ranks draw nothing
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            totals[0] += loss.detach().double() * len(y)
            totals[1] += len(y)
        dist.all_reduce(totals)
        losses.append((totals[0] / totals[1]).item())
        if dist.get_rank() == 0:
            print(f"epoch {epoch + 1}: loss {losses[-1]:.4f}")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, checkpoint)
        dist.barrier()
    dist.destroy_process_group()
    return losses
