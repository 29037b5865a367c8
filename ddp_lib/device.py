"""The launching process's side of the device and backend rule: the backend a launch gets by
default, and what this machine offers (a chosen backend is checked by
``ddp_lib.process_group.check_backend``, the one check, which the launcher's input checks call).

The rule itself (``local_device``, ``backend_for``, ``threads_per_rank``) is in
``ddp_lib.process_group``, which a copied worker takes along, so the parent and the ranks apply one rule.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddp_lib import process_group


def default_backend(world_size: int) -> str:
    """nccl only where CUDA has a GPU for every local rank (nccl refuses two ranks on one GPU),
    else gloo."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return process_group.backend_for(process_group.local_device(0)) if gpus >= max(world_size, 1) else "gloo"


def machine_report() -> dict:
    """What this machine offers for distributed training: versions, backends, devices, cores."""
    import platform

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.system(),
        "cores": process_group.usable_cores(),
        "backends": {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                     "mpi": dist.is_mpi_available()},
        "cuda_gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "mps": bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
    }
