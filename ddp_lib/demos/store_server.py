"""Lesson 01's look at who serves the store: a worker that finds the process listening on MASTER_PORT."""

from __future__ import annotations

import os
import re

import torch.distributed as dist

from ddp_lib.ports import port_holder
from ddp_lib.process_group import process_group


def who_serves_the_store(rank: int, world_size: int) -> dict:
    """Join the group with env://, then report this rank's process id and the id of the process that
    listens on MASTER_PORT: the store's server (found through /proc on Linux, else lsof; None if unknown)."""
    with process_group(rank, world_size, init_method="env://"):
        holder = port_holder(int(os.environ["MASTER_PORT"]))  # "process PID (command line)"
        # Every rank looks before any leaves: under torch's convention rank 0 serves the store, and a
        # rank 0 that left first would close it before a slower rank had looked.
        dist.barrier()
        found = re.match(r"process (\d+)", holder or "")
        return {"rank": rank, "pid": os.getpid(), "store_pid": int(found.group(1)) if found else None}


def shown_url(url: str, store_dir: str) -> str:
    """An init-method URL as the lesson prints it: this run's port as PORT, its temporary folder as /STORE_DIR."""
    return re.sub(r":\d+$", ":PORT", url).replace(store_dir, "/STORE_DIR")
