"""Which device a rank uses, which backend fits it, and how many CPU threads each rank gets."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_lib import process_group as _pg
from ddp_lib.errors import LaunchInputError

# Defined in process_group.py, which a copied worker takes along; named here as well so that
# the parent's checks and the ranks apply one rule.
from ddp_lib.process_group import (
    KNOWN_BACKENDS,
    backend_for,
    device_for,
    threads_per_rank,
    usable_cores,
)

__all__ = ["KNOWN_BACKENDS", "backend_for", "check_backend", "default_backend", "device_for",
           "machine_report", "threads_per_rank", "usable_cores"]


def default_backend(world_size: int) -> str:
    """nccl only where CUDA has a GPU for every local rank, else gloo: the backend of the
    last local rank's device."""
    return backend_for(device_for(max(world_size, 1) - 1))


def check_backend(backend: object, world_size: int) -> str:
    """Return ``backend`` if this machine can run it with ``world_size`` local ranks, else
    raise LaunchInputError with a one-line reason."""
    try:
        return _pg.check_backend(backend, world_size)
    except ValueError as e:
        raise LaunchInputError(str(e)) from None


def machine_report() -> dict:
    """What this machine offers for distributed training: versions, backends, devices, cores."""
    import platform

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.system(),
        "cores": usable_cores(),
        "backends": {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                     "mpi": dist.is_mpi_available()},
        "cuda_gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
    }
