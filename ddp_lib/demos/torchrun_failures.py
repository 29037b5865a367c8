"""Lesson 07: two classic failures as a cluster user meets them, in a script started by torchrun.

    torchrun --standalone --nproc-per-node=2 -m ddp_lib.demos.torchrun_failures crash
    torchrun --standalone --nproc-per-node=2 -m ddp_lib.demos.torchrun_failures hang
    torchrun --standalone --nproc-per-node=3 -m ddp_lib.demos.torchrun_failures late

``crash``: rank 1 raises while rank 0 trains. ``hang``: rank 0 alone calls ``all_reduce``
(evaluation under ``if rank == 0``) until the group's 3-second timeout. ``late``: the last rank
reaches ``init_process_group`` 10 s late, after the others' 3-second timeout.
"""

import faulthandler
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

# `kill -USR1 <pid>` makes this rank print its Python stack to stderr, and carry on.
faulthandler.register(signal.SIGUSR1)


@record  # torchrun's summary then shows this rank's exception, not only its exit code
def main(failure: str) -> None:
    rank = int(os.environ["RANK"])
    # No rank leaves init before all have joined: rank 1 raising at once could otherwise break a
    # peer still connecting ("connectFullMesh ... closed by peer") instead of showing its own error.
    os.environ.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    if failure == "late" and rank == int(os.environ["WORLD_SIZE"]) - 1:
        time.sleep(10)  # held up before init: a slow start, or a crash before this line
    dist.init_process_group("gloo", timeout=timedelta(seconds=3))
    try:
        print(f"rank {rank} started", flush=True)
        metric = torch.tensor([float(rank)])
        if failure == "crash" and rank == 1:
            raise ValueError("rank 1 read a corrupt batch")
        if failure == "hang" and rank == 0:
            dist.all_reduce(metric)  # evaluation on rank 0 only: nobody else calls it
        time.sleep(30)  # the other ranks "train" on; torchrun stops them when a rank fails
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
