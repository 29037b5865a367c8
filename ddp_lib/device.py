"""Which device a rank uses, which backend fits it, and how many CPU threads each rank gets."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ddp_lib.errors import LaunchInputError

# Backends a launch through ddp_lib can use. mpi needs mpirun to start the processes, so it
# is named but refused with that reason.
KNOWN_BACKENDS = ("gloo", "nccl", "mpi")


def device_for(local_rank: int) -> torch.device:
    """The device for this rank: ``cuda:<local_rank>`` where CUDA has that GPU, else CPU."""
    if torch.cuda.is_available() and local_rank < torch.cuda.device_count():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    """nccl for a CUDA device, gloo for anything else."""
    return "nccl" if device.type == "cuda" else "gloo"


def default_backend(world_size: int) -> str:
    """nccl only where CUDA has a GPU for every local rank, else gloo."""
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def check_backend(backend: object, world_size: int) -> str:
    """Return ``backend`` if this machine can run it with ``world_size`` local ranks, else
    raise LaunchInputError with a one-line reason."""
    if not isinstance(backend, str) or backend.lower() not in KNOWN_BACKENDS:
        raise LaunchInputError(
            f"unknown backend {backend!r}; accepted: 'gloo' (CPU, any machine) or 'nccl' (CUDA GPUs)"
        )
    backend = backend.lower()
    if backend == "mpi":
        raise LaunchInputError("backend 'mpi' needs processes started by mpirun; use 'gloo' or 'nccl' here")
    if backend == "gloo" and not dist.is_gloo_available():
        raise LaunchInputError("backend 'gloo' is not built into this torch; reinstall torch")
    if backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0 or not dist.is_nccl_available():
            raise LaunchInputError("backend 'nccl' needs CUDA GPUs and none is available here; use 'gloo'")
        if world_size > gpus:
            raise LaunchInputError(
                f"backend 'nccl' needs one GPU per rank: world size {world_size} but {gpus} GPU(s) here; "
                f"use at most {gpus} ranks or 'gloo'"
            )
    return backend


def usable_cores() -> int:
    """CPU cores this process may run on (respects affinity masks and containers)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def threads_per_rank(local_world_size: int) -> int:
    """Intra-op threads per rank so that the ranks on one machine share its cores, not fight."""
    return max(1, usable_cores() // max(1, local_world_size))


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
