"""Lesson 00's exercises: 1, the fixed file's ``demo_basic`` returning its loss too; 2, a worker that joins the
group and learns every rank's name."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group


class ToyModel(nn.Module):
    """The tutorial's model, as in ``my_work/classic_ddp.py``."""

    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank: int, world_size: int) -> tuple[float, list[float]]:
    """Exercise 1: one step of the fixed file, on the CPU; returns this rank's loss and the parameters."""
    os.environ.setdefault("MASTER_ADDR", "localhost")  # the tutorial's setup(), unless the caller chose a port
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    model = ToyModel()
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss = nn.MSELoss()(outputs, labels)  # this rank's own loss, from its own batch: nothing averages it
    loss.backward()  # DDP averages the gradients here
    optimizer.step()
    del ddp_model  # the project's workaround for a rare torch 2.13 hang, as the fixed file does
    dist.destroy_process_group()
    return round(loss.item(), 4), torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def who_am_i(rank: int, world_size: int, name: str) -> dict:
    """Exercise 2."""
    with process_group(rank, world_size):
        everyone = [None] * world_size
        dist.all_gather_object(everyone, name)  # fills everyone[r] with rank r's name, on every rank
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
