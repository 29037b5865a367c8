"""What a rank sees of its launcher: the environment variables torchrun (or ddp_lib's launcher)
sets, and a check that the process group they describe works."""

from __future__ import annotations

import os

# Shown with their values: the same on every run.
SHOWN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
         "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS")
# Shown only as set or unset: addresses, ports, ids and paths change from run to run.
PRESENCE = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE")


def launch_vars(rank: int, world_size: int) -> dict:
    """This rank's launch variables: values, or "set"/"unset" for addresses, ports, ids and paths
    (``env``, to print); the store's address and port, the run id and the parent's process id, under torchrun its
    node's agent (``ids``, to compare, not to print: they change every run). Reads the environment
    only, so a rank that runs just this never imports torch."""
    env = {name: os.environ.get(name, "unset") for name in SHOWN}
    env.update({name: "set" if name in os.environ else "unset" for name in PRESENCE})
    ids = {name: os.environ.get(name) for name in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")}
    ids["agent_pid"] = os.getppid()  # c10d numbers the nodes of one host by their agents' process ids
    return {"rank": rank, "env": env, "ids": ids}


def torchrun_env(rank: int, world_size: int) -> dict:
    """This rank's launch variables (:func:`launch_vars`) and the ranks an all_gather over the
    process group returns."""
    import torch  # here: launch_vars alone needs no torch
    import torch.distributed as dist

    try:  # inside the ddp_lib package
        from ddp_lib.process_group import process_group
    except ModuleNotFoundError:  # copied into a project next to process_group.py
        from process_group import process_group

    with process_group(rank, world_size) as device:
        gathered = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world_size)]
        dist.all_gather(gathered, torch.tensor([rank], device=device))
        return {**launch_vars(rank, world_size), "all_gather": [int(t.item()) for t in gathered]}
