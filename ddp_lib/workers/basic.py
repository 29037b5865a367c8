"""The classic "basic DDP example", corrected: the inputs are moved to the rank's device."""

from __future__ import annotations

import torch
from torch import nn, optim
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, process_group
    from ddp_lib.workers.shared import ToyModel, param_checksum
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import device_ids_for, process_group
    from shared import ToyModel, param_checksum


def demo_basic(rank: int, world_size: int, seed: int = 0) -> dict:
    """One training step of ToyModel under DDP; returns this rank's loss and the parameter
    checksum after the step (the same on every rank: that is what DDP guarantees).

    Args:
        seed: base seed; rank r uses seed + r.
    """
    with process_group(rank, world_size) as device:
        print(f"rank {rank} of {world_size} on {device.type}")
        torch.manual_seed(seed + rank)  # different weights and data per rank, on purpose
        model = ToyModel().to(device)
        # DDP copies rank 0's weights to every rank here. device_ids: [index] for a model on
        # one GPU (DDP then moves the inputs there), None for a CPU model.
        ddp_model = DDP(model, device_ids=device_ids_for(device))
        loss_fn = nn.MSELoss()
        optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10).to(device))
        labels = torch.randn(20, 5).to(device)
        loss = loss_fn(outputs, labels)
        loss.backward()  # gradients are averaged across ranks here, during backward
        optimizer.step()
        return {"rank": rank, "loss": round(loss.item(), 4), "checksum": param_checksum(model)}
