"""Lesson 10: when DDP is not enough. Memory per rank under DDP, ZeRO-1 and FSDP2, the collectives
each runs, an FSDP2 checkpoint and resume, and a 2x2 DeviceMesh.

    spawn(memory_run, 2, kwargs=dict(strategy="fsdp"))
    spawn(compare_strategies, 4)                   # ddp, zero1 and fsdp in one job
    spawn(fsdp_checkpoint, 2, kwargs=dict(checkpoint_dir=d, steps=4, save_at=2))
    spawn(mesh_2x2, 4)

Copyable: needs only torch and ``process_group`` (from ddp_lib, or a process_group.py beside it).
"""

from collections import Counter
from typing import Literal

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import process_group

Strategy = Literal["ddp", "zero1", "fsdp"]
# Names of the events torch.profiler records for collectives (c10d's ops and gloo's own).
COLLECTIVE_PREFIXES = ("c10d::", "gloo:")


def make_mlp(width: int = 256, layers: int = 4, seed: int = 0) -> nn.Sequential:
    """``layers`` blocks of Linear(width, width) -> ReLU, then Linear(width, 1); the same weights
    for the same seed on every rank."""
    torch.manual_seed(seed)
    blocks = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def batch(step: int, rank: int, batch_size: int, width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: random inputs and targets that depend on (seed, step, rank) only,
    so a resumed run reads the same data as an uninterrupted one."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    return torch.randn(batch_size, width, generator=g), torch.randn(batch_size, 1, generator=g)


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: a DTensor's local shard, or the tensor itself."""
    return t.to_local() if isinstance(t, DTensor) else t


def tensor_bytes(tensors) -> int:
    """Bytes of the local parts of ``tensors`` (numel x element size)."""
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer state this rank holds. ZeroRedundancyOptimizer keeps its shard in
    ``.optim`` (a plain optimizer over this rank's parameters)."""
    inner = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return tensor_bytes(t for state in inner.state.values() for t in state.values() if isinstance(t, torch.Tensor))


def activation_bytes(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes autograd saves for backward in one forward of ``model`` (and the loss), counting each
    storage once and leaving out the parameters themselves."""
    param_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in param_storages:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        nn.functional.mse_loss(model(x), y)
    return sum(saved.values())


def wrap(model: nn.Module, strategy: Strategy, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model and optimizer (Adam) for a strategy: DDP; DDP + ZeroRedundancyOptimizer (ZeRO-1);
    FSDP2 with each Linear its own unit (ZeRO-3-style)."""
    if strategy == "ddp":
        return DDP(model), torch.optim.Adam(model.parameters(), lr=lr)
    if strategy == "zero1":
        return DDP(model), ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    if strategy == "fsdp":
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)  # all-gathered just before its forward, resharded after
        fully_shard(model)
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"strategy must be 'ddp', 'zero1' or 'fsdp', got {strategy!r}")


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One step; returns the loss averaged over all ranks."""
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return round(mean.item() / dist.get_world_size(), 6)


def memory_run(rank: int, world_size: int, strategy: Strategy = "ddp", steps: int = 3, width: int = 256,
               layers: int = 4, batch_size: int = 16, lr: float = 1e-3, seed: int = 0) -> dict:
    """Train the MLP for ``steps`` Adam steps under ``strategy``, then measure what this rank holds.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        strategy: "ddp", "zero1" (DDP + ZeroRedundancyOptimizer) or "fsdp" (FSDP2 fully_shard).
        steps: training steps (the last one is traced with torch.profiler).
        width: width of the hidden layers.
        layers: number of hidden Linear layers.
        batch_size: samples per rank per step.
        lr: Adam's learning rate.
        seed: seed of the weights and the data.

    Returns {"rank", "strategy", "losses", "bytes" ({"parameters", "gradients", "optimizer state",
    "activations"}), "collectives" (profiler events of the last step, by name), "placements" and
    "local_shape"/"global_shape" (of the first weight)}.
    """
    with process_group(rank, world_size):
        model = make_mlp(width, layers, seed)
        x0, y0 = batch(0, rank, batch_size, width, seed)
        activations = activation_bytes(model, x0, y0)  # the same under every strategy: none shards them
        model, optimizer = wrap(model, strategy, lr)
        losses = []
        for step in range(steps):
            x, y = batch(step, rank, batch_size, width, seed)
            if step < steps - 1:
                losses.append(train_step(model, optimizer, x, y))
                continue
            with profile(activities=[ProfilerActivity.CPU]) as trace:
                losses.append(train_step(model, optimizer, x, y))
        # The last all_reduce in train_step is the loss average, not part of the strategy: left out.
        counts = Counter(e.name for e in trace.events() if e.name.startswith(COLLECTIVE_PREFIXES))
        counts.subtract({"c10d::allreduce_": 1, "gloo:all_reduce": 1})
        params = list(model.parameters())
        first = params[0]
        return {
            "rank": rank, "strategy": strategy, "losses": losses,
            "bytes": {"parameters": tensor_bytes(params),
                      "gradients": tensor_bytes(p.grad for p in params if p.grad is not None),
                      "optimizer state": optimizer_state_bytes(optimizer),
                      "activations": activations},
            "collectives": {name: n for name, n in sorted(counts.items()) if n > 0},
            "placements": [str(p) for p in first.placements] if isinstance(first, DTensor) else None,
            "local_shape": list(local(first).shape), "global_shape": list(first.shape),
        }



def compare_strategies(rank: int, world_size: int, strategies: str = "ddp,zero1,fsdp", steps: int = 3) -> dict:
    """``memory_run`` for each strategy in turn, in one job (one launch instead of three).

    Args:
        rank: this process's rank.
        world_size: number of processes.
        strategies: comma-separated strategies, each "ddp", "zero1" or "fsdp".
        steps: training steps per strategy.

    Returns {strategy: memory_run's result on this rank}.
    """
    with process_group(rank, world_size):  # memory_run joins this group instead of creating one
        return {s: memory_run(rank, world_size, s, steps) for s in strategies.split(",")}


def fsdp_checkpoint(rank: int, world_size: int, checkpoint_dir: str = "", steps: int = 4, save_at: int = 0,
                    resume: bool = False, width: int = 256, layers: int = 4, batch_size: int = 16,
                    lr: float = 1e-3, seed: int = 0) -> dict:
    """Train an FSDP2 model, optionally saving a distributed checkpoint or resuming from one.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        checkpoint_dir: directory of the distributed checkpoint (each rank writes its own shards).
        steps: the step to train up to (counting steps done before a resume).
        save_at: save after this many steps (0: never).
        resume: load model and optimizer from ``checkpoint_dir`` first and continue at ``save_at``.
        width: width of the hidden layers.
        layers: number of hidden Linear layers.
        batch_size: samples per rank per step.
        lr: Adam's learning rate.
        seed: seed of the weights and the data.

    Returns {"rank", "start_step", "losses" (of the steps this run trained), "checksum" (of the full parameters)}.
    """
    with process_group(rank, world_size):
        model, optimizer = wrap(make_mlp(width, layers, seed), "fsdp", lr)
        start = 0
        if resume:
            # Sharded state dicts: every rank loads only its own shards from the files.
            model_state, optim_state = get_state_dict(model, optimizer)
            state = {"model": model_state, "optimizer": optim_state}
            dcp.load(state, checkpoint_id=checkpoint_dir)
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
            start = save_at
        losses = []
        for step in range(start, steps):
            losses.append(train_step(model, optimizer, *batch(step, rank, batch_size, width, seed)))
            if step + 1 == save_at and not resume:
                model_state, optim_state = get_state_dict(model, optimizer)
                dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=checkpoint_dir)
        # full_tensor() all-gathers each parameter: every rank must call it.
        checksum = sum(p.full_tensor().double().sum().item() for p in model.parameters())
        return {"rank": rank, "start_step": start, "losses": losses, "checksum": round(checksum, 6)}


def mesh_2x2(rank: int, world_size: int) -> dict:
    """A 2x2 DeviceMesh on 4 ranks: its groups, an all-reduce along one dimension, and FSDP2 on
    both dimensions (HSDP: replicated along one, sharded along the other).

    Args:
        rank: this process's rank.
        world_size: number of processes (must be 4).

    Returns {"rank", "coordinate", "replicate_group", "shard_group" (ranks in each of this rank's
    groups), "sum_over_replicate" (all-reduce of the ranks along "replicate"), "placements",
    "local_shape" (of the first weight under HSDP)}.
    """
    if world_size != 4:
        raise ValueError(f"mesh_2x2 needs world_size 4, got {world_size}")
    with process_group(rank, world_size) as device:
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
        value = torch.tensor([float(rank)])
        dist.all_reduce(value, group=mesh.get_group("replicate"))
        model = make_mlp(width=8, layers=1)
        fully_shard(model, mesh=mesh)  # a 2-D mesh: replicate along dim 0, shard along dim 1
        first = next(model.parameters())
        return {"rank": rank, "coordinate": mesh.get_coordinate(),
                "replicate_group": dist.get_process_group_ranks(mesh.get_group("replicate")),
                "shard_group": dist.get_process_group_ranks(mesh.get_group("shard")),
                "sum_over_replicate": value.item(),
                "placements": [str(p) for p in first.placements], "local_shape": list(first.to_local().shape)}
