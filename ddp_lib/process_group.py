"""Joining and leaving a process group, the same way under ddp_lib's launcher, mp.spawn and torchrun.

    with process_group(rank, world_size) as device:
        ...  # collectives, DDP; the group is destroyed on the way out, error or not

This file imports only torch and the standard library: copy it next to a worker module and the
worker runs in any project (see the README, "Copying a worker into your project"). So it also
holds the device and backend rule (which device a rank uses, which backend fits it, DDP's
device_ids for it). The models, batches and tensor helpers that workers of several lessons share
are in ``ddp_lib/workers/shared.py``.
"""

from __future__ import annotations

import errno
import os
import pkgutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

# Long enough for a slow first all-reduce on an oversubscribed laptop, short enough that a
# rank stuck in a collective its peers never reach fails within a minute, not half an hour
# (gloo's own default).
COLLECTIVE_TIMEOUT = timedelta(seconds=60)

# teardown()'s pause before destroying a group, in which gloo's threads finish releasing their work.
GLOO_SETTLE_SECONDS = 0.02

# The launcher passes a backend chosen in the parent (e.g. ``--backend gloo``) through this.
BACKEND_ENV = "DDP_LIB_BACKEND"

# What the classic tutorial's setup() uses when nothing else says where rank 0's store is:
# loopback (the store has no authentication) and a fixed port every rank can agree on.
DEFAULT_MASTER_ADDR = "127.0.0.1"
DEFAULT_MASTER_PORT = 12355

# mpi needs mpirun to start the processes, so it is named but refused with that reason.
KNOWN_BACKENDS = ("gloo", "nccl", "mpi")


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


def port_in_use(port: int) -> bool:
    """True if a server already listens on ``port`` (probed as rank 0's store would bind it)."""
    with socket.socket() as s:
        # The store binds with SO_REUSEADDR too, so a port left in TIME_WAIT by the previous
        # run counts as free, as it is for the store.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def local_device(local_rank: int) -> torch.device:
    """The device for the rank with this LOCAL_RANK: ``cuda:<local_rank % device_count()>`` where
    CUDA has a GPU, else the CPU. The modulo keeps the index valid where each rank sees only its
    own GPU (a scheduler that sets CUDA_VISIBLE_DEVICES per rank): every rank then uses cuda:0."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def device_for(local_rank: int) -> torch.device:
    """The device for this rank: the same rule as ``local_device``."""
    return local_device(local_rank)


def backend_for(device: torch.device) -> str:
    """torch's own default backend for the device type: nccl for CUDA, gloo for the CPU."""
    return dist.Backend.default_device_backend_map.get(device.type, "gloo")


def device_ids_for(device: torch.device) -> list[int | None] | None:
    """DDP's ``device_ids`` for a model on ``device``: ``[index]`` for a model on one CUDA GPU (DDP
    then moves each forward's inputs there; an index-less "cuda" gives ``[None]``, which DDP reads as
    the current device); None for any other device: a CPU model (a non-empty list is a ValueError
    there), or another accelerator, whose inputs DDP then leaves where they are."""
    return [device.index] if device.type == "cuda" else None


def check_backend(backend: object, world_size: int) -> str:
    """Return ``backend`` (lower case) if this machine can run it with ``world_size`` local
    ranks, else raise ValueError with a one-line reason."""
    if not isinstance(backend, str) or backend.lower() not in KNOWN_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; accepted: 'gloo' (CPU, any machine) or 'nccl' (CUDA GPUs)")
    backend = backend.lower()
    if backend == "mpi":
        raise ValueError("backend 'mpi' needs processes started by mpirun; use 'gloo' or 'nccl' here")
    if backend == "gloo" and not dist.is_gloo_available():
        raise ValueError("backend 'gloo' is not built into this torch; reinstall torch")
    if backend == "nccl":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0 or not dist.is_nccl_available():
            raise ValueError("backend 'nccl' needs CUDA GPUs and none is available here; use 'gloo'")
        if world_size > gpus:
            raise ValueError(
                f"backend 'nccl' needs one GPU per rank: world size {world_size} but {gpus} GPU(s) here; "
                f"use at most {gpus} ranks or 'gloo'"
            )
    return backend


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity mask, so a CPU set (taskset, SLURM,
    ``docker --cpuset-cpus``) counts, but a CPU quota (``docker --cpus``, Kubernetes limits) does not."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def threads_per_rank(local_world_size: int) -> int:
    """Intra-op threads per rank so that the ranks on one machine share its cores, not fight."""
    return max(1, usable_cores() // max(1, local_world_size))


def _set_rendezvous_defaults(rank: int, world_size: int) -> None:
    """MASTER_ADDR/MASTER_PORT as the tutorial's setup() sets them, where no launcher did."""
    os.environ.setdefault("MASTER_ADDR", DEFAULT_MASTER_ADDR)
    if "MASTER_PORT" in os.environ:
        return  # a launcher (ddp_lib, torchrun) or the user chose it, and may already serve it
    if world_size == 1:
        os.environ["MASTER_PORT"] = str(free_port())  # nobody else has to agree on it
        return
    os.environ["MASTER_PORT"] = str(DEFAULT_MASTER_PORT)
    # Rank 0 will serve the store on this port. If something already listens there, torch says
    # so only after retrying for seconds, in a DistNetworkError; say it now, naming the port.
    if rank == 0 and port_in_use(DEFAULT_MASTER_PORT):
        raise RuntimeError(
            f"MASTER_PORT {DEFAULT_MASTER_PORT} (the default) is already in use on this machine; "
            f"set MASTER_PORT to a free port in the environment before starting the ranks"
        )


def setup(rank: int | None = None, world_size: int | None = None, *, backend: str | None = None,
          init_method: str = "env://", timeout: timedelta = COLLECTIVE_TIMEOUT,
          device: torch.device | str | None = None) -> torch.device:
    """Join the default process group and return this rank's device.

    ``rank``/``world_size`` default to RANK/WORLD_SIZE (set by ddp_lib's launcher and by
    torchrun). ``device`` defaults to LOCAL_RANK's (``local_device``); ``device="cpu"`` keeps a
    rank on the CPU where GPUs are too. The backend follows the device unless given. If this
    process already belongs to a group of the same rank and size, that group is kept.
    """
    rank = env_int("RANK") if rank is None else rank
    world_size = env_int("WORLD_SIZE") if world_size is None else world_size
    local_rank = env_int("LOCAL_RANK", rank)
    local_world_size = env_int("LOCAL_WORLD_SIZE", world_size)
    chosen_device = device is not None
    device = torch.device(device) if chosen_device else local_device(local_rank)
    # A rank that sees a single GPU may be one of several ranks that each see only their own (a
    # scheduler's CUDA_VISIBLE_DEVICES per rank), so it cannot count the node's GPUs: there nccl's own
    # check ("Duplicate GPU detected") catches two ranks on one GPU.
    sees_node_gpus = torch.cuda.is_available() and torch.cuda.device_count() > 1
    # The launcher's backend suits the device it expects (LOCAL_RANK's); a device chosen here picks its own.
    launcher_backend = None if chosen_device else os.environ.get(BACKEND_ENV)
    backend = check_backend(backend or launcher_backend or backend_for(device),
                            local_world_size if sees_node_gpus else 1)

    if dist.is_initialized():
        if dist.get_rank() == rank and dist.get_world_size() == world_size:
            return device
        raise RuntimeError(
            f"this process is already rank {dist.get_rank()} of {dist.get_world_size()}; "
            f"call teardown() before joining as rank {rank} of {world_size}"
        )

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(threads_per_rank(local_world_size))
    options = {}
    if device.type == "cuda":
        # The current device is what "cuda", .cuda() and torch.ones(..., device="cuda") mean;
        # left at its default, that is cuda:0 on every rank, so every rank's tensors (and, at
        # its first collective, the nccl communicator built on the tensors' device) would sit
        # on GPU 0, all ranks on one GPU instead of one GPU each.
        torch.cuda.set_device(device)
        # nccl forms its communicator lazily, at the first collective, on that tensor's device.
        # Binding the group to this rank's GPU forms it now (torch 2.13 distributed_c10d:
        # eager_connect_single_device), so a broken GPU setup fails here rather than at the
        # first all-reduce; barrier() also uses this GPU and new_group() can split it.
        options["device_id"] = device
    if init_method == "env://":
        _set_rendezvous_defaults(rank, world_size)
    # No rank returns from init_process_group before every rank has joined (torch's own barrier,
    # off by default): a rank that left while a peer was still connecting would break that peer's
    # connect under gloo ("connectFullMesh failed ... Connection closed by peer").
    os.environ.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, timeout=timeout,
                            **options)
    return device


def teardown() -> None:
    """Leave the process group, if this process is in one: a short pause, then ``destroy_process_group()``.

    The pause lets gloo's threads most likely finish the last backward's all-reduce first; it does not
    wait for them. Without it, a DDP model freed right after can hang the rank now and then (see the
    comment below)."""
    if dist.is_initialized():
        # destroy_process_group() only drops torch's references (gloo has no shutdown). In runs that
        # hung, a debugger showed a DDP model freed after it (as its function returned): its reducer,
        # freed with the GIL held, destroyed the group, whose destructor joined gloo's threads. One
        # of them was still releasing the last backward's all-reduce, which needs the GIL: a
        # deadlock. Sleeping releases the GIL, so those threads most likely finish first. Under
        # ddp_lib's launcher (run_ranks, ddp_lib.mp) the rank's child code already keeps every group
        # alive; this pause is for ranks started otherwise (torchrun, torch.multiprocessing, a copy).
        # torch 2.13, tools/gloo_shutdown_check.py, one series of 30 runs per ending on a loaded 2-core machine:
        # destroy-return hung 7 of 30, barrier-destroy-return 1 of 30; the rate depends on the load.
        # docs/launcher.md counts other endings, teardown() then return among them (0 of 200).
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


def wrap_ddp(model: nn.Module, device: torch.device, **options) -> DDP:
    """DDP around ``model`` (already on ``device``), with the device_ids for that device."""
    return DDP(model, device_ids=device_ids_for(device), **options)


def in_one_job(rank: int, world_size: int, calls: dict[str, tuple[str, dict]]) -> dict:
    """Several workers one after the other in one job: one launch (and one import of their modules)
    instead of one each. ``calls`` maps a name to ("module:function", keyword arguments); each
    worker joins the group created here. Returns {name: that worker's result on this rank}."""
    with process_group(rank, world_size):
        return {name: pkgutil.resolve_name(target)(rank, world_size, **kwargs)
                for name, (target, kwargs) in calls.items()}
