"""Workers written the way the official DDP tutorial writes them: their own setup() and
cleanup() around dist.init_process_group / dist.destroy_process_group, no ddp_lib inside."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    # Only if not set: under ddp_lib.launch the launcher has set them already.
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size):
    setup(rank, world_size)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    cleanup()



def basic_inside_a_function(rank, world_size):
    """demo_basic called from the worker, as an exercise checker calls a learner's function: its
    DDP model is freed as demo_basic returns, after cleanup(), before the worker returns.
    Returns how many process groups the launcher's rank holds (its registry's ``kept``) by then."""
    from torch.distributed import distributed_c10d

    demo_basic(rank, world_size)
    return len(getattr(distributed_c10d._pg_map, "kept", ()))
