"""Lesson 04's worker in plain PyTorch: the loop a learner writes, run as a script or by a launcher.

    python -m ddp_lib.demos.plain_ddp     # two ranks under mp.spawn, on this machine

Its only imports from ddp_lib build the model and each rank's rows of the data.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector

from ddp_lib.workers.shared import make_mlp, param_checksum, rank_batch


def worker(rank, world_size, steps=4, B=4):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # meets at MASTER_ADDR:MASTER_PORT
    model = make_mlp(seed=rank)              # different weights on each rank
    before = param_checksum(model)           # the sum of all parameters: a fingerprint
    weights = {"before": parameters_to_vector(model.parameters()).detach().clone()}  # every one, to compare
    ddp_model = DDP(model)                   # rank 0's weights on every rank
    after = param_checksum(model)
    weights["after"] = parameters_to_vector(model.parameters()).detach().clone()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = rank_batch(step, rank, world_size, B)  # this rank's rows of the step's batch
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp_model(x), y)
        loss.backward()                      # fills each .grad, averaged over the ranks
        optimizer.step()                     # uses .grad
    trained = param_checksum(model)
    weights["trained"] = parameters_to_vector(model.parameters()).detach().clone()
    dist.destroy_process_group()
    print(f"checksum before DDP() {before:+.6f}, after DDP() {after:+.6f}, after {steps} steps {trained:+.6f}")
    return {"before": before, "after": after, "trained": trained, "weights": weights}  # mp.spawn drops it


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "12355")  # a free port; lesson 02 picks one
    mp.spawn(worker, args=(2,), nprocs=2)
