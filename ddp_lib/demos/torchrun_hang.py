"""A rank that hangs, and the group's timeout that ends the wait (lesson 06). Run it under torchrun,
with one restart allowed:

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m ddp_lib.demos.torchrun_hang

On attempt 0, the ranks join the default group with its default timeout, then make a second
group, ``new_group``, with a timeout of 1 s. Rank 1 then sleeps instead of reaching that group's
barrier, as a hung rank would. torchrun sees two running ranks and does nothing. Rank 0's barrier
fails when the group's timeout runs out; rank 0 exits with code 1. The short timeout is the
barrier's alone: a rank that starts late (say, slow to import torch) cannot make
``init_process_group`` fail instead. Its agent then stops rank 1 and starts attempt 1. A real
job's attempt 1 would resume from its checkpoint; this one has no work left, so its ranks only say
that they started, without importing torch (a second or two per rank). Only rank 0 prints.
Without ``timeout=``, rank 0 would wait 30 minutes.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import timedelta

TIMEOUT_S = 1  # the group's timeout, in seconds


def main() -> None:
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])  # 0, then 1 after the restart
    rank = int(os.environ["RANK"])
    if attempt > 0:  # the restart: nothing hangs now, and this job has no work left
        if rank == 0:
            print(f"attempt {attempt}, rank {rank}: started again", flush=True)
        return
    import torch.distributed as dist  # here: attempt 1 needs no torch

    dist.init_process_group("gloo")  # the default timeout: waits for a rank that starts late
    group = dist.new_group(timeout=timedelta(seconds=TIMEOUT_S))  # in a real job: a few times the longest step
    if rank == 1:
        time.sleep(60)  # the hang: this rank never reaches the barrier; its agent stops it
    start = time.monotonic()
    try:
        dist.barrier(group=group)  # rank 0 waits here for rank 1
    except RuntimeError as e:  # the group's timeout ran out
        waited = "at least" if time.monotonic() - start >= TIMEOUT_S else "less than"
        message = re.sub(r"\[[^\]]*\] ", "", str(e)).splitlines()[0]  # without gloo's source path
        print(f"attempt {attempt}, rank {rank}: the barrier waited {waited} {TIMEOUT_S} s, then raised"
              f" {type(e).__name__}: {message}", flush=True)
        sys.exit(1)  # a failed rank: --max-restarts applies


if __name__ == "__main__":
    main()
