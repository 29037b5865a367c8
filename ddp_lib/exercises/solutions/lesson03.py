"""Lesson 03, exercise 1: a worker that finds its device from LOCAL_RANK and joins the group itself;
exercise 3: a checkpoint saved on ``cuda:0`` loaded onto the rank's device."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.workers.shared import ToyModel, param_checksum


def one_step(rank: int, world_size: int) -> dict:
    local_rank = dist.get_node_local_rank()  # LOCAL_RANK: GPUs are numbered per node, not RANK
    if torch.cuda.is_available():  # lesson 03's rule; ddp_lib.process_group.local_device is the same
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)  # before init_process_group: "cuda" now means this rank's GPU
        dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = ToyModel().to(device)
        ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
        ddp_model(torch.randn(20, 10).to(device)).sum().backward()
        optimizer.step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
    finally:
        dist.destroy_process_group()


def load_on_device(path, device: torch.device) -> dict:
    return torch.load(path, map_location=device)  # every tensor onto device, whatever device saved it
