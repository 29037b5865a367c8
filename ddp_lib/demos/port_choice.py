"""Lesson 00's other fix for a busy port: the fixed classic example, with the port passed to every rank.

``setup(rank, world_size, port)`` is the classic ``setup()`` with ``MASTER_PORT`` taken from its third
argument, and ``demo_basic(rank, world_size, port)`` is the lesson's fixed ``demo_basic`` that passes it
on. A launch gives every rank the same port:
``mp.spawn(demo_basic, args=(world_size, port), ...)``.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.workers.shared import ToyModel


def setup(rank, world_size, port):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = str(port)  # the port the launch passed, not a fixed 12355
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def demo_basic(rank, world_size, port):
    """The fixed classic example on ``port``; returns every weight and bias, flattened into one list."""
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size, port)
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:  # one GPU per rank, else the CPU
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    torch.manual_seed(rank)
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)

    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10).to(device))
    labels = torch.randn(20, 5).to(device)
    loss_fn(outputs, labels).backward()
    optimizer.step()

    dist.destroy_process_group()  # the classic cleanup()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def wait_in_python_or_store(rank, world_size, port):
    """Rank 0 waits in Python code (``time.sleep``); rank 1 holds a store on ``port`` and waits in it.

    Each rank prints ``rank R pid PID`` just before its wait; neither returns within 60 s.
    """
    if rank == 0:
        print(f"rank {rank} pid {os.getpid()}", flush=True)
        time.sleep(60)
    else:
        store = dist.TCPStore("localhost", port, world_size=1, is_master=True, timeout=timedelta(seconds=60))
        print(f"rank {rank} pid {os.getpid()}", flush=True)
        store.get("a key nobody sets")  # a wait inside torch's C++ code
