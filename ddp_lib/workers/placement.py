"""Lesson 03 workers: where tensors live. What runs on a CPU machine runs; the GPU-only ones
say so in their docstring and are only launched by the notebook when CUDA GPUs are present."""

from __future__ import annotations

import importlib
import os
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, env_int, local_device, process_group, teardown
    from ddp_lib.workers.shared import ToyModel, param_checksum
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import device_ids_for, env_int, local_device, process_group, teardown
    from shared import ToyModel, param_checksum


def input_placement(rank: int, world_size: int, pass_device_ids: bool = False,
                    move_inputs: bool = False, device: str | None = None) -> dict:
    """The classic example's forward pass. Returns the device the model saw its input on and the
    device of the output.

    Args:
        pass_device_ids: True wraps with device_ids=[rank], as the example does (ValueError on CPU);
            False wraps with device_ids=None.
        move_inputs: move the inputs to the rank's device first.
        device: "cpu" keeps the model on the CPU, with gloo, on any machine; None uses the rank's
            device (a GPU where CUDA has one).
    """
    with process_group(rank, world_size, device=device) as device:
        torch.manual_seed(0)
        model = ToyModel().to(device)
        ddp_model = DDP(model, device_ids=[rank] if pass_device_ids else None)
        seen = []
        model.register_forward_pre_hook(lambda _module, args: seen.append(str(args[0].device)))
        inputs = torch.randn(20, 10)  # created on the CPU, as in the classic example
        outputs = ddp_model(inputs.to(device) if move_inputs else inputs)
        return {"model_on": str(device), "input_seen_on": seen[0], "output_on": str(outputs.device)}


def nccl_cpu_tensor(rank: int, world_size: int) -> dict:
    """GPU only: join an nccl group, then all-reduce a CUDA tensor and a CPU one. An nccl group has a
    backend for CUDA tensors only, so the CPU tensor finds none."""
    with process_group(rank, world_size, backend="nccl") as device:
        on_gpu = torch.ones(1, device=device)
        dist.all_reduce(on_gpu)  # fine
        dist.all_reduce(torch.ones(1))  # a CPU tensor: no backend of this group serves the CPU
        return {"sum": on_gpu.item()}


def where_am_i(rank: int, world_size: int) -> dict:
    """What a rank learns from its environment, and the device it should use (LOCAL_RANK's).
    Under plain mp.spawn, which sets none of these, they read as setup() reads them: LOCAL_RANK
    = rank, LOCAL_WORLD_SIZE = world_size, GROUP_RANK = 0 (one node)."""
    local_rank = dist.get_node_local_rank(fallback_rank=rank)  # LOCAL_RANK where a launcher set it, else rank
    local_world_size = env_int("LOCAL_WORLD_SIZE", world_size)
    with process_group(rank, world_size):
        return {
            "RANK": env_int("RANK", rank), "LOCAL_RANK": local_rank, "GROUP_RANK": env_int("GROUP_RANK", 0),
            "WORLD_SIZE": env_int("WORLD_SIZE", world_size), "LOCAL_WORLD_SIZE": local_world_size,
            # A node with LOCAL_WORLD_SIZE GPUs numbers them 0..LOCAL_WORLD_SIZE-1, whatever its rank.
            "right_gpu": f"cuda:{local_rank}",
        }


def simulate_nodes(rank: int, world_size: int, nproc_per_node: int = 2,
                   target: str = "ddp_lib.workers.placement:where_am_i") -> object:
    """Run ``target`` ("module:function") as if the ranks were spread over nodes of
    ``nproc_per_node`` processes each: LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK are rewritten
    as torchrun would set them on each node. All ranks really run on this machine.

    Args:
        nproc_per_node: processes per simulated node.
        target: "module:function" of the worker to run.
    """
    os.environ.update({"LOCAL_RANK": str(rank % nproc_per_node), "LOCAL_WORLD_SIZE": str(nproc_per_node),
                       "GROUP_RANK": str(rank // nproc_per_node)})
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)(rank, world_size)


def without_set_device(rank: int, world_size: int) -> dict:
    """GPU only: init nccl without torch.cuda.set_device and use "cuda" (which means the current
    device, cuda:0, on every rank), then all-reduce: two ranks of one nccl group on one GPU."""
    # No set_device before it; a short timeout so that a stuck communicator becomes an error.
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        tensor = torch.ones(1, device="cuda")
        current = torch.cuda.current_device()
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        return {"current_device": current, "sum": tensor.item()}
    finally:
        teardown()


def set_device_after_init(rank: int, world_size: int) -> dict:
    """GPU only: init nccl first, then torch.cuda.set_device(local_rank), then barrier() and an
    all-reduce on "cuda". init_process_group's Python code reads no current device (only device_id=),
    so this order should work too, as long as nothing used the current device before set_device."""
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        torch.cuda.set_device(env_int("LOCAL_RANK", rank))
        dist.barrier()  # without device_id: on the current device, now this rank's own
        tensor = torch.ones(1, device="cuda")
        dist.all_reduce(tensor)
        return {"current_device": torch.cuda.current_device(), "sum": tensor.item()}
    finally:
        teardown()


def with_set_device(rank: int, world_size: int) -> dict:
    """GPU only: without_set_device plus its one missing line, torch.cuda.set_device(rank) before
    init (no device_id=): set_device alone makes "cuda" mean this rank's own GPU."""
    torch.cuda.set_device(rank)  # the fix; on one machine rank is the local rank
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        tensor = torch.ones(1, device="cuda")
        current = torch.cuda.current_device()
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        return {"current_device": current, "sum": tensor.item()}
    finally:
        teardown()


def checkpoint_devices(rank: int, world_size: int, path: str | None = None, saved_as: str | None = None) -> dict:
    """Rank 0 saves ToyModel's state_dict from its device; every rank then loads it three ways.
    Returns where the file says the tensors were, and where they land without and with map_location
    (or torch's error, as "Type: message").

    Args:
        path: the checkpoint file (None: ddp_lib_lesson03.pt in the temporary directory).
        saved_as: write this location (such as "cuda:0") in the file instead of rank 0's device, as
            a GPU rank 0 would; None: rank 0's own device.
    """
    if path is None:
        path = os.path.join(tempfile.gettempdir(), "ddp_lib_lesson03.pt")
    with process_group(rank, world_size) as device:
        torch.manual_seed(0)
        model = DDP(ToyModel().to(device), device_ids=device_ids_for(device))
        if rank == 0:
            _save(model.module.state_dict(), path, saved_as)
        dist.barrier()  # nobody reads before rank 0 has written
        saved_on = set()

        def record(storage, location):
            saved_on.add(location)  # the device recorded in the file for this tensor
            return storage
        torch.load(path, map_location=record)
        try:
            plain = str(torch.load(path)["net1.weight"].device)  # back to the device it was saved from: rank 0's
        except RuntimeError as e:  # that device does not exist here
            plain = f"{type(e).__name__}: {e}"
        mapped = torch.load(path, map_location=device)  # this rank's own device
        model.module.load_state_dict(mapped)
        return {"saved_on": sorted(saved_on), "loaded_without_map_location": plain,
                "loaded_with_map_location": str(mapped["net1.weight"].device), "checksum": param_checksum(model)}


def _save(state: dict, path: str, saved_as: str | None) -> None:
    """``torch.save(state, path)``; with ``saved_as``, every tensor's location in the file reads ``saved_as``.
    torch.save asks each tagger registered with torch.serialization.register_package for a storage's
    location, lowest priority first; this one answers first, and is removed again after the save."""
    if saved_as is None:
        torch.save(state, path)
        return
    registry = torch.serialization._package_registry
    before = list(registry)
    torch.serialization.register_package(-100, lambda storage: saved_as, lambda obj, location: None)
    try:
        torch.save(state, path)
    finally:
        registry[:] = before


# ---- helpers


def expected_device(local_rank: int) -> str:
    """The device a rank with this local_rank should use on this machine (lesson 03's rule), as a string."""
    return str(local_device(local_rank))
