"""Joining and leaving a process group, the same way under ddp_lib's launcher, mp.spawn and torchrun.

    with process_group(rank, world_size) as device:
        ...  # collectives, DDP; the group is destroyed on the way out, error or not
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from ddp_lib.device import backend_for, check_backend, device_for, threads_per_rank

# Long enough for a slow first all-reduce on an oversubscribed laptop, short enough that a
# rank stuck in a collective its peers never reach fails within a minute, not half an hour
# (gloo's own default).
DEFAULT_TIMEOUT = timedelta(seconds=60)

GLOO_SETTLE_SECONDS = 0.02

# The launcher passes a backend chosen in the parent (e.g. ``--backend gloo``) through this.
BACKEND_ENV = "DDP_LIB_BACKEND"


def env_int(name: str, default: int | None = None) -> int:
    """An integer environment variable, with an error that names it when it is missing or bad."""
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(f"environment variable {name} is not set; launch with ddp_lib, mp.spawn or torchrun")
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"environment variable {name}={value!r} is not an integer") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def setup(rank: int | None = None, world_size: int | None = None, *, backend: str | None = None,
          init_method: str = "env://", timeout: timedelta = DEFAULT_TIMEOUT) -> torch.device:
    """Join the default process group and return this rank's device.

    ``rank``/``world_size`` default to RANK/WORLD_SIZE (set by ddp_lib's launcher and by
    torchrun). The backend follows the device unless given. If this process already belongs
    to a group of the same rank and size, that group is kept.
    """
    rank = env_int("RANK") if rank is None else rank
    world_size = env_int("WORLD_SIZE") if world_size is None else world_size
    local_rank = env_int("LOCAL_RANK", rank)
    local_world_size = env_int("LOCAL_WORLD_SIZE", world_size)
    device = device_for(local_rank)
    backend = check_backend(backend or os.environ.get(BACKEND_ENV) or backend_for(device), local_world_size)

    if dist.is_initialized():
        if dist.get_rank() == rank and dist.get_world_size() == world_size:
            return device
        raise RuntimeError(
            f"this process is already rank {dist.get_rank()} of {dist.get_world_size()}; "
            f"call teardown() before joining as rank {rank} of {world_size}"
        )

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(threads_per_rank(local_world_size))
    if device.type == "cuda":
        # Before init: otherwise every rank's nccl communicator lands on GPU 0.
        torch.cuda.set_device(device)
    if init_method == "env://":
        # Loopback, never all interfaces: the store has no authentication.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            if world_size != 1:
                raise RuntimeError("MASTER_PORT is not set; every rank must be given the same free port")
            os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    return device


def teardown() -> None:
    """Leave the process group, if this process is in one."""
    if dist.is_initialized():
        # gloo's worker threads may still be releasing finished work, which takes the GIL.
        # If the group is then destroyed from a thread holding the GIL (DDP's reducer often
        # drops the last reference when the worker returns), the destructor's join deadlocks.
        # Sleeping releases the GIL so those threads finish first.
        time.sleep(GLOO_SETTLE_SECONDS)
        dist.destroy_process_group()


@contextmanager
def process_group(rank: int | None = None, world_size: int | None = None, **kwargs) -> Iterator[torch.device]:
    """``setup`` on entry, yielding the device; ``teardown`` on exit if this call created the group."""
    created = not dist.is_initialized()
    device = setup(rank, world_size, **kwargs)
    try:
        yield device
    finally:
        if created:
            teardown()


def is_main() -> bool:
    """True on rank 0, or when no process group exists."""
    return not dist.is_initialized() or dist.get_rank() == 0
