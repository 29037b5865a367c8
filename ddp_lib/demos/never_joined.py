"""Lesson 01: a rank that never joins. Two ranks start, but each says the world has three ranks."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import torch.distributed as dist

from ddp_lib.demos.missing_rank import torch_cpp_logs_hidden  # the same silencing of torch's C++ log lines


def store_error_parts(line: str) -> dict:
    """A store error's first line split for printing: ``said``, the line without the keys it waited for
    and with the seconds, which vary with the machine's load, as "N"; ``keys``, those keys ("" if none)."""
    said, _, keys = line.partition(", keys: ")
    return {"said": re.sub(r"after \d+ seconds", "after N seconds", said), "keys": keys}


def join_without_last_rank(rank: int, world_size: int, timeout_s: float = 2.0) -> dict:
    """Call ``init_process_group`` on gloo with ``world_size`` ranks and a ``timeout_s`` timeout. Launch
    it with ``nprocs=world_size - 1``: the last rank is never started. Returns this rank's error as
    "Type: first line" ("joined" if none came), the seconds it waited, and that line's parts for
    printing (``store_error_parts``)."""
    start = time.monotonic()
    try:
        with torch_cpp_logs_hidden():  # torch's C++ also logs its socket timeouts, with addresses and times
            dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                    timeout=timedelta(seconds=timeout_s))
    except Exception as error:  # noqa: BLE001 - the error is what this demo reports
        waited = time.monotonic() - start
        if rank == 0:
            # Rank 0 hosts the store: it stays up one more timeout, so that the other ranks end
            # their wait by their own timeout, never by finding the store gone.
            time.sleep(timeout_s)
        line = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
        return {"error": line, "waited": waited, **store_error_parts(line)}
    dist.destroy_process_group()
    return {"error": "joined", "waited": time.monotonic() - start, **store_error_parts("joined")}
