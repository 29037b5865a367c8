"""A job that fails the way a training job does under torchrun: one rank raises, the other is
still working. Run it as torchrun's program to see torchrun's failure summary:

    torchrun --standalone --nproc-per-node=2 -m ddp_lib.workers.torchrun_failure

``@record`` writes the raising rank's traceback to the file torchrun names in
``TORCHELASTIC_ERROR_FILE``; torchrun's summary then shows it (without it, the summary's
traceback only says "To enable traceback see: ..." and the traceback is in the rank's stderr).
"""

from __future__ import annotations

import os
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by torchrun
    print(f"rank {rank}: started", flush=True)
    dist.barrier()  # from here on, every rank is running
    if rank == 0:
        raise RuntimeError("injected failure on rank 0")
    time.sleep(60)  # a long step; torchrun stops this rank with SIGTERM long before it ends


if __name__ == "__main__":
    main()
