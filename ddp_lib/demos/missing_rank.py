"""Lesson 01: ``dist.monitored_barrier`` names the rank that never arrives."""

from __future__ import annotations

import contextlib
import os
import time
from datetime import timedelta

import torch.distributed as dist

from ddp_lib.process_group import process_group


def one_rank_missing(rank: int, world_size: int, missing: int | None = None, timeout_s: float = 2.0) -> str:
    """Every rank but ``missing`` (the last rank by default) calls ``dist.monitored_barrier`` with a
    ``timeout_s`` timeout. Returns what this rank saw: the first line of its error, or "passed"."""
    missing = world_size - 1 if missing is None else missing
    with process_group(rank, world_size):
        if rank == missing:
            # Alive but busy elsewhere, as a rank stuck in its own code is: its connections stay open.
            time.sleep(timeout_s + 1.0)
            return "did not call monitored_barrier"
        try:
            with torch_cpp_logs_hidden():  # torch's C++ logs the same line again, with a timestamp
                dist.monitored_barrier(timeout=timedelta(seconds=timeout_s))
        except RuntimeError as error:
            return str(error).strip().splitlines()[0]
        return "passed"


@contextlib.contextmanager
def torch_cpp_logs_hidden():
    """Hide what torch's C++ code writes to standard error (file descriptor 2) for the block, then restore it."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
