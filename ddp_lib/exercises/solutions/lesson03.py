"""Lesson 03, exercise 1: a worker that finds its device from LOCAL_RANK."""

import os

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group
from ddp_lib.workers.shared import ToyModel, param_checksum


def one_step(rank: int, world_size: int) -> dict:
    local_rank = int(os.environ["LOCAL_RANK"])  # GPUs are numbered per node: not RANK
    with process_group(rank, world_size):
        if torch.cuda.is_available():  # lesson 03's rule; ddp_lib.process_group.local_device is the same
            device = torch.device("cuda", local_rank % torch.cuda.device_count())
        else:
            device = torch.device("cpu")
        model = ToyModel().to(device)
        ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
        ddp_model(torch.randn(20, 10).to(device)).sum().backward()
        optimizer.step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
