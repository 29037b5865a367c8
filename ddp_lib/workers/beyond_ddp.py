"""Lesson 10: when DDP is not enough. Memory per rank under DDP, ZeRO-1 and FSDP2, the collectives
each runs, an FSDP2 checkpoint and resume, and a 2x2 DeviceMesh.

    run_ranks(memory_run, 2, kwargs=dict(strategy="fsdp"))
    run_ranks(compare_strategies, 4)                   # ddp, zero1 and fsdp in one job
    run_ranks(fsdp_checkpoint, 2, kwargs=dict(checkpoint_dir=d, steps=4, save_at=2))
    run_ranks(mesh_2x2, 4)

Copyable: needs only torch and ``process_group`` (from ddp_lib, or a process_group.py beside it).
"""

import gc
import random
import time
from collections import Counter
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.checkpoint import checkpoint

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import process_group

# ZeroRedundancyOptimizer, FSDP2 (fully_shard, DTensor), DeviceMesh and DCP are imported inside the
# functions that use them: importing them takes seconds, and a lesson's kernel imports this module
# only to show its source and its arithmetic (zero_prediction, bytes_sent).

Strategy = Literal["ddp", "ddp_view", "zero1", "zero1_view", "fsdp", "fsdp_no_reshard", "fsdp_root_only"]
STRATEGIES = ("ddp", "ddp_view", "zero1", "zero1_view", "fsdp", "fsdp_no_reshard")
# Names of the events torch.profiler records for collectives (c10d's ops and gloo's own).
COLLECTIVE_PREFIXES = ("c10d::", "gloo:")


def memory_run(rank: int, world_size: int, strategy: Strategy = "ddp", steps: int = 3, width: int = 256,
               layers: int = 4, batch_size: int = 16, lr: float = 1e-3, seed: int = 0) -> dict:
    """Build, wrap and train the MLP for ``steps`` Adam steps under ``strategy`` inside torch.profiler
    with profile_memory=True; measure this rank's memory from the allocations it recorded, and count
    the parts from tensor sizes.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        strategy: "ddp", "ddp_view" (gradient_as_bucket_view=True), "zero1" (DDP +
            ZeroRedundancyOptimizer), "zero1_view" (the same with gradient_as_bucket_view=True and
            parameters_as_bucket_view=True),
            "fsdp" (FSDP2 fully_shard) or
            "fsdp_no_reshard" (fully_shard with reshard_after_forward=False).
        steps: training steps (the last one's collectives are counted).
        width: width of the hidden layers.
        layers: number of hidden Linear layers.
        batch_size: samples per rank per step.
        lr: Adam's learning rate.
        seed: seed of the weights and the data.

    Returns {"rank", "strategy", "losses", "n_params", "bytes" (counted: "parameters", "gradients",
    "optimizer state", and "activations" saved for backward by the wrapped model), "measured" (bytes
    allocated and live: "between steps" before the last step, "peak" over the whole run, "forward"
    added by the last forward; "live tensors": ``live_tensor_bytes`` at the same moment as "between
    steps", less what it found before the model was built), "collectives" (profiler events of the last step, by name),
    "placements" and "local_shape"/"global_shape" (of the first weight)}.
    """
    from torch.distributed.tensor import DTensor

    with process_group(rank, world_size):
        gc.collect()
        # What is alive now (torch's own objects, earlier runs' leftovers) leaves Python's collections
        # and the walk below for good: both then look only at what this run makes, and take milliseconds.
        gc.freeze()
        before = live_tensor_bytes()  # what earlier runs in this process left, if any: subtracted below
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as trace:
            model = make_deep_mlp(width, layers, seed)
            n_params = sum(p.numel() for p in model.parameters())
            model, optimizer = wrap(model, strategy, lr)
            bucket_buffers = []
            if isinstance(model, DDP):
                model.register_comm_hook(bucket_buffers, recording_buckets)
            losses = []
            for step in range(steps):
                bucket_buffers.clear()  # keep the last step's
                if step == steps - 1:
                    # Let every rank finish the previous step and drop what only Python's reference
                    # cycles still hold (finished communication work), so that "between steps" is as
                    # quiet a moment as a rank can make it.
                    dist.barrier()
                    gc.collect()
                    walked = live_tensor_bytes() - before
                with record_function("last step" if step == steps - 1 else "step"):
                    losses.append(train_step(model, optimizer, *batch(step, rank, batch_size, width, seed)))
        timeline = live_bytes(trace)
        step_start, step_end = phase(trace, "last step")
        forward_start, forward_end = phase(trace, "forward")
        measured = {"between steps": live_at(timeline, step_start), "peak": max(live for _, live in timeline),
                    "forward": live_at(timeline, forward_end) - live_at(timeline, forward_start),
                    "live tensors": walked}
        # The last all_reduce in train_step is the loss average, not part of the strategy: left out.
        counts = Counter(e.name() for e in trace.profiler.kineto_results.events()
                         if e.name().startswith(COLLECTIVE_PREFIXES) and step_start <= e.start_ns() <= step_end)
        counts.subtract({"c10d::allreduce_": 1, "gloo:all_reduce": 1})
        params = list(model.parameters())
        first = params[0]
        return {
            "rank": rank, "strategy": strategy, "losses": losses, "n_params": n_params,
            "bytes": {"parameters": tensor_bytes(params),
                      "gradients": tensor_bytes(p.grad for p in params if p.grad is not None),
                      "optimizer state": optimizer_state_bytes(optimizer),
                      "activations": activation_bytes(model, *batch(0, rank, batch_size, width, seed))},
            "measured": measured, "layout": bucket_layout(model, bucket_buffers) if bucket_buffers else None,
            "head_local_shape": list(local(params[-2]).shape),
            "collectives": {name: n for name, n in sorted(counts.items()) if n > 0},
            "placements": [str(p) for p in first.placements] if isinstance(first, DTensor) else None,
            "local_shape": list(local(first).shape), "global_shape": list(first.shape),
        }


# Bytes one rank sends, on average, per byte of the full tensor, in a ring of n ranks (lesson 08).
# A broadcast is a chain: n - 1 hops of the whole tensor, shared by n ranks.
RING_FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: (n - 1) / n}


# Element sizes of the dtype names torch.profiler records.
DTYPE_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2}


def step_payloads(rank: int, world_size: int, strategy: Strategy, width: int = 256, layers: int = 4,
                  batch_size: int = 16, seed: int = 0) -> list[tuple[str, int]]:
    """The collectives of one training step (the second) under ``strategy``, in order, each as
    (kind, bytes of the full tensor it carries): kind is "all_reduce", "broadcast", "all_gather"
    or "reduce_scatter". FSDP2's sizes are the shapes torch.profiler records for
    ``_allgather_base_`` (its output) and ``_reduce_scatter_base_`` (its input). The profiler records
    no shapes for DDP's and ZeRO-1's tensor lists, so a comm hook notes each bucket DDP all-reduces
    and a wrapper around ``dist.broadcast`` notes each tensor ZeroRedundancyOptimizer broadcasts.
    The loss average of ``train_step`` is left out. Call inside a process group."""
    model, optimizer = wrap(make_deep_mlp(width, layers, seed), strategy, 1e-3)
    noted: list[tuple[str, int]] = []
    if isinstance(model, DDP):
        def note_bucket(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            noted.append(("all_reduce", bucket.buffer().numel() * bucket.buffer().element_size()))
            return default_hooks.allreduce_hook(None, bucket)  # what DDP does without a hook

        model.register_comm_hook(None, note_bucket)
    broadcast = dist.broadcast

    def note_broadcast(tensor: torch.Tensor, *args, **kwargs):
        noted.append(("broadcast", tensor.numel() * tensor.element_size()))
        return broadcast(tensor, *args, **kwargs)

    train_step(model, optimizer, *batch(0, rank, batch_size, width, seed))  # the first step sets up
    noted.clear()
    dist.broadcast = note_broadcast
    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
            train_step(model, optimizer, *batch(1, rank, batch_size, width, seed))
    finally:
        dist.broadcast = broadcast
    for e in trace.profiler.kineto_results.events():
        if e.name() in ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_"):
            full = e.shapes()[0 if "allgather" in e.name() else 1]  # (output, input) for both
            numel = 1
            for n in full:
                numel *= n
            kind = "all_gather" if "allgather" in e.name() else "reduce_scatter"
            noted.append((kind, numel * DTYPE_BYTES[e.dtypes()[0]]))
    return noted


def compare_strategies(rank: int, world_size: int, strategies: str = "ddp,ddp_view,zero1,fsdp,fsdp_no_reshard",
                       steps: int = 3, timed_steps: int = 21) -> dict:
    """``memory_run`` for each strategy in turn, in one job (one launch instead of three).

    Args:
        rank: this process's rank.
        world_size: number of processes.
        strategies: comma-separated strategies, each one of STRATEGIES.
        steps: training steps per strategy.
        timed_steps: steps of each strategy timed afterwards, the strategies in turn (0: none).

    Returns {strategy: memory_run's result on this rank, with "payloads" (step_payloads), and
    "step_ms" and "step_cpu_ms" (step_times_in_turn's wall and CPU times)}.
    """
    with process_group(rank, world_size):  # memory_run joins this group instead of creating one
        names = strategies.split(",")
        runs = {s: {**memory_run(rank, world_size, s, steps), "payloads": step_payloads(rank, world_size, s)}
                for s in names}
        times = step_times_in_turn(rank, names, timed_steps) if timed_steps else {}
        return {s: {**runs[s], "step_ms": times.get(s, {}).get("wall_ms", []),
                    "step_cpu_ms": times.get(s, {}).get("cpu_ms", [])} for s in names}


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
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    with process_group(rank, world_size):
        model, optimizer = wrap(make_deep_mlp(width, layers, seed), "fsdp", lr)
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
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if world_size != 4:
        raise ValueError(f"mesh_2x2 needs world_size 4, got {world_size}")
    with process_group(rank, world_size) as device:
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
        value = torch.tensor([float(rank)])
        dist.all_reduce(value, group=mesh.get_group("replicate"))
        model = make_deep_mlp(width=8, layers=1)
        fully_shard(model, mesh=mesh)  # a 2-D mesh: replicate along dim 0, shard along dim 1
        first = next(model.parameters())
        return {"rank": rank, "coordinate": mesh.get_coordinate(),
                "replicate_group": dist.get_process_group_ranks(mesh.get_group("replicate")),
                "shard_group": dist.get_process_group_ranks(mesh.get_group("shard")),
                "sum_over_replicate": value.item(),
                "placements": [str(p) for p in first.placements], "local_shape": list(first.to_local().shape)}


def hsdp_step(rank: int, world_size: int, width: int = 8, batch_size: int = 4, seed: int = 0) -> dict:
    """One HSDP training step on a 2x2 DeviceMesh (4 ranks): FSDP2 over the mesh's "shard" dimension,
    replicated over "replicate", every rank with its own batch; the step's collectives counted.

    Args:
        rank: this process's rank.
        world_size: number of processes (must be 4).
        width: width of the one hidden layer.
        batch_size: samples per rank.
        seed: seed of the weights and the data.

    Returns {"rank", "coordinate", "replicate_group", "shard_group" (ranks of this rank's groups),
    "placements", "local_shapes" (of each parameter), "collectives" (the step's c10d operators and
    what gloo ran for them, by name), "groups" ({"all_gather", "reduce_scatter", "all_reduce"}: the ranks
    of each group that FSDP2 ran that collective in, in the step), "grad_checksum" (of this rank's gradient
    shards), "loss",
    "global_batch_gap" (largest difference of the gradient from one process's on all 4 ranks' batches)}.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if world_size != 4:
        raise ValueError(f"hsdp_step needs world_size 4, got {world_size}")
    with process_group(rank, world_size) as device:
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
        model = make_deep_mlp(width=width, layers=1, seed=seed)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)  # a 2-D mesh: replicated along dim 0, sharded along dim 1
        fully_shard(model, mesh=mesh)
        x, y = batch(0, rank, batch_size, width, seed)  # each of the 4 ranks its own samples
        # FSDP2 calls these three torch.distributed functions by name (torch 2.13's _fsdp_collectives.py):
        # wrapped for the step, each call notes the ranks of the group it ran in.
        wrapped = {"all_gather_single": "all_gather", "reduce_scatter_single": "reduce_scatter",
                   "all_reduce": "all_reduce"}
        originals = {name: getattr(dist, name) for name in wrapped}
        groups: dict[str, list[list[int]]] = {kind: [] for kind in wrapped.values()}

        def noting(name: str):
            def call(*args, group=None, **kwargs):
                ranks = dist.get_process_group_ranks(group or dist.group.WORLD)
                if ranks not in groups[wrapped[name]]:
                    groups[wrapped[name]].append(ranks)
                return originals[name](*args, group=group, **kwargs)
            return call

        for name in wrapped:
            setattr(dist, name, noting(name))
        try:
            with profile(activities=[ProfilerActivity.CPU]) as trace:
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
        finally:
            for name, original in originals.items():
                setattr(dist, name, original)
        counts = Counter(e.name for e in trace.events() if e.name.startswith(("c10d::", "gloo:")))  # asked, ran
        # One process on all 4 ranks' batches: HSDP's gradient must be that one's average.
        reference = make_deep_mlp(width=width, layers=1, seed=seed)
        everything = [batch(0, r, batch_size, width, seed) for r in range(world_size)]
        nn.functional.mse_loss(reference(torch.cat([b[0] for b in everything])),
                               torch.cat([b[1] for b in everything])).backward()
        gap = max((p.grad.full_tensor() - q.grad).abs().max().item()  # full_tensor: every rank gathers
                  for p, q in zip(model.parameters(), reference.parameters()))
        return {"rank": rank, "coordinate": mesh.get_coordinate(), "global_batch_gap": gap,
                "replicate_group": dist.get_process_group_ranks(mesh.get_group("replicate")),
                "shard_group": dist.get_process_group_ranks(mesh.get_group("shard")),
                "placements": [str(p) for p in next(model.parameters()).placements],
                "local_shapes": [list(p.to_local().shape) for p in model.parameters()],
                "collectives": dict(sorted(counts.items())), "groups": groups,
                "grad_checksum": round(sum(p.grad.to_local().double().sum().item() for p in model.parameters()), 6),
                "loss": round(loss.item(), 6)}


def fsdp_extras(rank: int, world_size: int, width: int = 256, layers: int = 4, batch_size: int = 16,
                max_norm: float = 0.05, seed: int = 0) -> dict:
    """Four things a sharded training loop adds, each measured against a plain run on this rank:
    clip_grad_norm_ on FSDP2's DTensor gradients against DDP's, FSDP2 with a bfloat16
    MixedPrecisionPolicy, activation checkpointing (the hidden layers as one segment on a plain model,
    then each block checkpointed and sharded), and what an optimizer created before fully_shard updates.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        width: width of the hidden layers.
        layers: number of hidden Linear layers.
        batch_size: samples per rank.
        max_norm: the clipping threshold (below the gradient norm, so clipping acts).
        seed: seed of the weights and the data.

    Returns {"rank", "clip" ({"ddp_norm", "fsdp_norm", "norm_type" (of FSDP2's returned norm),
    "norm_placements" (its DTensor placements), "max_grad_diff" (clipped gradients, FSDP2's gathered
    against DDP's)}), "mixed" ({"compute_dtype", "param_dtype", "grad_dtype" (of the sharded gradient),
    "output_dtype" (of the model's output), "output_rel_err", "grad_rel_err" (bfloat16's outputs and
    reduce-scattered gradients against float32's, by ``relative_error``)}), "checkpointing" ({"forward_bytes",
    "forward_bytes_checkpointed", "max_grad_diff", "sharded_grad_diff" (each block checkpointed, then
    sharded: gradients gathered against DDP's), "all_gathers" ({"sharded", "sharded_checkpointed"}:
    c10d all-gathers of one forward and backward)}), "order" ({"optimizer_holds_model_params",
    "model_params_held" (of the model's parameters, those the optimizer holds), "model_params",
    "model_changed"}: an Adam made before fully_shard, after one step)}.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor

    with process_group(rank, world_size):
        x, y = batch(0, rank, batch_size, width, seed)
        # clip_grad_norm_ on DTensor gradients: DTensor's ops combine the shards' norms across ranks.
        ddp, _ = wrap(make_deep_mlp(width, layers, seed), "ddp", 1e-3)
        nn.functional.mse_loss(ddp(x), y).backward()
        ddp_grads = [q.grad.clone() for q in ddp.parameters()]  # before clipping, for checkpointing below
        ddp_norm = nn.utils.clip_grad_norm_(ddp.parameters(), max_norm)
        fsdp, _ = wrap(make_deep_mlp(width, layers, seed), "fsdp", 1e-3)
        nn.functional.mse_loss(fsdp(x), y).backward()
        fsdp_norm = nn.utils.clip_grad_norm_(fsdp.parameters(), max_norm)
        norm_type = type(fsdp_norm).__name__
        # Already combined across ranks inside clip_grad_norm_: Replicate, the same on every rank.
        norm_placements = [repr(p) for p in fsdp_norm.placements] if isinstance(fsdp_norm, DTensor) else []
        fsdp_norm = fsdp_norm.full_tensor() if isinstance(fsdp_norm, DTensor) else fsdp_norm
        grad_diff = max((p.grad.full_tensor() - q.grad).abs().max().item()
                        for p, q in zip(fsdp.parameters(), ddp.parameters()))
        clip = {"ddp_norm": round(ddp_norm.item(), 6), "fsdp_norm": round(fsdp_norm.item(), 6),
                "norm_type": norm_type, "norm_placements": norm_placements,
                "max_grad_diff": grad_diff}

        # MixedPrecisionPolicy: compute and all-gather in bfloat16, keep float32 shards, reduce in float32.
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        mixed_model = make_deep_mlp(width, layers, seed)
        seen: list[torch.dtype] = []
        mixed_model[0].register_forward_hook(lambda module, inputs, output: seen.append(module.weight.dtype))
        for layer in mixed_model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mp_policy=policy)
        fully_shard(mixed_model, mp_policy=policy)
        output = mixed_model(x)  # bfloat16: the policy sets no output_dtype, so nothing casts it back
        loss_bf16 = nn.functional.mse_loss(output.float(), y)
        loss_bf16.backward()
        first = next(mixed_model.parameters())
        # What bfloat16 changes, against float32 on the same batch: the outputs, and the gradients
        # FSDP2 reduce-scatters (gathered), against DDP's float32 gradients of the same global batch.
        bf16_grads = [p.grad.full_tensor() for p in mixed_model.parameters()]
        mixed = {"compute_dtype": str(seen[0]).removeprefix("torch."),
                 "param_dtype": str(first.dtype).removeprefix("torch."),
                 "grad_dtype": str(first.grad.dtype).removeprefix("torch."),
                 "output_dtype": str(output.dtype).removeprefix("torch."),
                 "output_rel_err": relative_error(output.float(), make_deep_mlp(width, layers, seed)(x)),
                 "grad_rel_err": relative_error(torch.cat([g.flatten() for g in bf16_grads]),
                                                torch.cat([g.flatten() for g in ddp_grads]))}

        # Activation checkpointing: the hidden layers as one segment, which saves only its input.
        plain, checkpointed = make_deep_mlp(width, layers, seed), make_deep_mlp(width, layers, seed)
        blocks = list(checkpointed)
        checkpointed = nn.Sequential(Checkpointed(nn.Sequential(*blocks[:-1])), blocks[-1])  # one segment
        grads = []
        sizes = []
        for model in (plain, checkpointed):
            loss, size = forward_bytes(model, x, y)
            loss.backward()
            sizes.append(size)
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        checkpointing = {"forward_bytes": sizes[0], "forward_bytes_checkpointed": sizes[1],
                         "max_grad_diff": (grads[0] - grads[1]).abs().max().item()}
        # Under FSDP2: checkpoint each block first, then shard each checkpointed block, then the root.
        all_gathers = {}
        for name, checkpoint_blocks in (("sharded", False), ("sharded_checkpointed", True)):
            layers_ = list(make_deep_mlp(width, layers, seed))
            blocks = [nn.Sequential(*layers_[i:i + 2]) for i in range(0, len(layers_) - 1, 2)]  # Linear, ReLU
            blocks = [Checkpointed(b) if checkpoint_blocks else b for b in blocks]
            model = nn.Sequential(*blocks, layers_[-1])
            for block in blocks:
                fully_shard(block)
            fully_shard(model)
            with profile(activities=[ProfilerActivity.CPU]) as trace:
                nn.functional.mse_loss(model(x), y).backward()
            all_gathers[name] = sum(e.name.startswith("c10d::") and "allgather" in e.name for e in trace.events())
        checkpointing["sharded_grad_diff"] = max((p.grad.full_tensor() - g).abs().max().item()
                                                 for p, g in zip(model.parameters(), ddp_grads))
        checkpointing["all_gathers"] = all_gathers

        # The optimizer made before fully_shard holds the parameters fully_shard replaced.
        early = make_deep_mlp(width, layers, seed)
        early_optimizer = torch.optim.Adam(early.parameters(), lr=1e-3)
        for layer in early:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(early)
        before = [local(p).detach().clone() for p in early.parameters()]
        nn.functional.mse_loss(early(x), y).backward()
        early_optimizer.step()
        model_ids = {id(p) for p in early.parameters()}
        held = [id(p) in model_ids for g in early_optimizer.param_groups for p in g["params"]]
        order = {"optimizer_holds_model_params": all(held),
                 "model_params_held": sum(held), "model_params": len(model_ids),
                 "model_changed": any(not torch.equal(local(p), b) for p, b in zip(early.parameters(), before))}
        return {"rank": rank, "clip": clip, "mixed": mixed, "checkpointing": checkpointing, "order": order}


def seeded_by_rank(rank: int, world_size: int, width: int = 8) -> dict:
    """Each rank builds the model with its own rank as the seed, then wraps it three ways: DDP, FSDP2
    over all ranks, and HSDP on a 2x2 DeviceMesh (4 ranks). DDP broadcasts rank 0's weights; FSDP2
    broadcasts nothing, so each rank keeps its rows of the weights it built.

    Returns {"rank", and for "ddp", "fsdp", "hsdp": {"same_on_every_rank" (the full weights, gathered
    on every rank, agree), "rank0s_weights" (they are rank 0's initial ones)}, "own_rows" (under FSDP2
    this rank's shard of the first weight holds the rows of its own initial weight), "own_rows_sums"
    (the sums of that shard and of those rows, rounded to 4 places)}.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if world_size != 4:
        raise ValueError(f"seeded_by_rank needs world_size 4, got {world_size}")
    with process_group(rank, world_size) as device:
        rank0s = torch.cat([p.detach().flatten() for p in make_deep_mlp(width, 1, seed=0).parameters()])

        def full(model: nn.Module) -> torch.Tensor:  # full_tensor all-gathers a DTensor: every rank calls it
            return torch.cat([(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().flatten()
                              for p in model.parameters()])

        def summary(weights: torch.Tensor) -> dict:
            everyone = [torch.empty_like(weights) for _ in range(world_size)]
            dist.all_gather(everyone, weights)
            return {"same_on_every_rank": all(torch.equal(w, everyone[0]) for w in everyone),
                    "rank0s_weights": torch.equal(weights, rank0s)}

        mine = make_deep_mlp(width, 1, seed=rank)
        own_first = mine[0].weight.detach().clone()
        result = {"rank": rank, "ddp": summary(full(DDP(mine)))}
        sharded = make_deep_mlp(width, 1, seed=rank)
        fully_shard(sharded)
        rows = width // world_size
        shard, own = sharded[0].weight.to_local(), own_first[rank * rows:(rank + 1) * rows]
        result["own_rows"] = torch.equal(shard, own)
        result["own_rows_sums"] = [round(shard.sum().item(), 4), round(own.sum().item(), 4)]
        result["fsdp"] = summary(full(sharded))
        mesh = init_device_mesh(device.type, (2, 2), mesh_dim_names=("replicate", "shard"))
        hybrid = make_deep_mlp(width, 1, seed=rank)
        fully_shard(hybrid, mesh=mesh)
        result["hsdp"] = summary(full(hybrid))
        return result


def cuda_peaks(rank: int, world_size: int, strategies: str = "ddp,ddp_view,zero1_view,fsdp,fsdp_no_reshard",
               steps: int = 3) -> dict:
    """On GPUs only (nccl, one GPU per rank): each strategy in turn trains ``steps`` Adam steps of the
    lesson's model, and torch.cuda.max_memory_allocated() measures its peak.

    Returns {strategy: the most bytes this rank's tensors held at once, above what was held before}.
    """
    with process_group(rank, world_size) as device:
        if device.type != "cuda":
            raise RuntimeError("cuda_peaks needs one GPU per rank")
        peaks = {}
        for strategy in strategies.split(","):
            gc.collect()  # the previous strategy's model, optimizer and DDP reducer
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            model, optimizer = wrap(make_deep_mlp().to(device), strategy, 1e-3)
            for step in range(steps):
                x, y = batch(step, rank, 16, 256)
                train_step(model, optimizer, x.to(device), y.to(device))
            peaks[strategy] = torch.cuda.max_memory_allocated(device) - before
            del model, optimizer
        return peaks


# ---- helpers


def make_deep_mlp(width: int = 256, layers: int = 4, seed: int = 0) -> nn.Sequential:
    """``layers`` blocks of Linear(width, width) -> ReLU, then Linear(width, 1); the same weights
    for the same seed on every rank."""
    # The same seed on every rank: DDP would broadcast rank 0's weights anyway, but FSDP2 broadcasts
    # nothing, and each rank keeps its rows of the weights it built (seeded_by_rank shows it).
    torch.manual_seed(seed)
    blocks = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def batch(step: int, rank: int, batch_size: int, width: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: random inputs and targets that depend on (seed, step, rank) only,
    so a resumed run reads the same data as an uninterrupted one."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    return torch.randn(batch_size, width, generator=g), torch.randn(batch_size, 1, generator=g)


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """The norm of ``approx - exact`` over the norm of ``exact``, as a float."""
    return ((approx - exact).norm() / exact.norm()).item()


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank holds: a DTensor's local shard, or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def tensor_bytes(tensors) -> int:
    """Bytes of the local parts of ``tensors`` (numel x element size)."""
    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the optimizer state this rank holds. ZeroRedundancyOptimizer keeps its shard in
    ``.optim`` (a plain optimizer over this rank's parameters)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    inner = optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer
    return tensor_bytes(t for state in inner.state.values() for t in state.values() if isinstance(t, torch.Tensor))


def activation_bytes(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes that one forward of ``model`` (and the loss) leaves held: the storages of autograd's
    saved tensors, and of parameters gathered in the forward and still held at its end (FSDP2 with
    reshard_after_forward=False), leaving out the parameters held before it.

    Each storage is counted once, known by the storage object itself: torch hands out one Python
    object per storage, and holding it here keeps its id from being reused. Keying by address would
    merge two storages that FSDP2 placed at the same address one after the other. Each storage is
    sized at the end of the forward, so one that FSDP2 freed (resized to zero bytes) counts nothing.
    """
    held_before = [local(p).untyped_storage() for p in model.parameters()]
    kept: dict[int, torch.UntypedStorage] = {}

    def keep(storage: torch.UntypedStorage) -> None:
        if not any(storage is p for p in held_before):
            kept[id(storage)] = storage  # the object kept alive, so its id stays its own

    def pack(t: torch.Tensor) -> torch.Tensor:
        keep(t.untyped_storage())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = nn.functional.mse_loss(model(x), y)
    for p in model.parameters():  # FSDP2 registers the gathered parameters while it keeps them
        keep(local(p).untyped_storage())
    total = sum(storage.nbytes() for storage in kept.values())
    del loss
    return total


def wrap(model: nn.Module, strategy: Strategy, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model and optimizer (Adam) for a strategy: DDP (``ddp_view``: with
    gradient_as_bucket_view=True); DDP + ZeroRedundancyOptimizer (ZeRO-1; ``zero1_view``: its DDP
    with gradient_as_bucket_view=True and the optimizer with parameters_as_bucket_view=True);
    FSDP2 with each Linear its own unit (ZeRO-3-style); the same with reshard_after_forward=False
    (full parameters kept from forward to backward, as FSDP1's SHARD_GRAD_OP, "ZeRO-2");
    ``fsdp_root_only``: ``fully_shard`` on the root alone, one unit for the whole model (not in
    STRATEGIES: only lesson 10's "How large a unit?" runs it)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer

    if strategy in ("ddp", "ddp_view"):  # ddp_view: the gradients are views into DDP's buckets
        return DDP(model, gradient_as_bucket_view=strategy == "ddp_view"), torch.optim.Adam(model.parameters(), lr=lr)
    if strategy in ("zero1", "zero1_view"):
        view = strategy == "zero1_view"
        ddp = DDP(model, gradient_as_bucket_view=view)
        # parameters_as_bucket_view=True: each rank's parameters become views into one flat tensor, so
        # the step ends in one broadcast per rank instead of one per parameter tensor; the same bytes.
        return ddp, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr,
                                            parameters_as_bucket_view=view)
    if strategy in ("fsdp", "fsdp_no_reshard"):
        # fully_shard broadcasts nothing, unlike DDP: each rank keeps its rows of the weights it built.
        # So every rank must build the same ones: make_deep_mlp seeds them alike on every rank.
        for layer in model:
            if isinstance(layer, nn.Linear):  # all-gathered just before its forward
                fully_shard(layer, reshard_after_forward=strategy == "fsdp")  # True: freed again after it
        fully_shard(model)
        # Only now: fully_shard replaced every parameter with a new sharded one.
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    if strategy == "fsdp_root_only":
        fully_shard(model)  # one unit: every weight gathered together
        return model, torch.optim.Adam(model.parameters(), lr=lr)
    raise ValueError(f"strategy must be one of {', '.join(map(repr, STRATEGIES + ('fsdp_root_only',)))}, "
                     f"got {strategy!r}")


def zero_prediction(n_params: int, world_size: int, stage: int, bytes_per_param: tuple = (4, 4, 8)) -> int:
    """Bytes per rank between steps by the ZeRO paper's formula: parameters, gradients and optimizer
    state take ``bytes_per_param`` bytes each per parameter ((4, 4, 8) for float32 Adam; (2, 2, 12)
    for mixed precision Adam with float32 master weights); stage 1 divides the state by the world
    size, stage 2 the gradients too, stage 3 everything."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0 (DDP), 1, 2 or 3, got {stage!r}")
    params, grads, state = (n_params * b for b in bytes_per_param)
    return round(params / (world_size if stage >= 3 else 1) + grads / (world_size if stage >= 2 else 1)
                 + state / (world_size if stage >= 1 else 1))


def live_bytes(trace: profile) -> list[tuple[int, int]]:
    """(time in ns, bytes live) after every CPU allocation and free the profiler recorded, counting
    only what was allocated inside the profile. The profiler keeps the raw allocation records in its
    kineto results; its per-operator tables attribute them to operators instead."""
    records = sorted((e for e in trace.profiler.kineto_results.events() if e.name() == "[memory]"),
                     key=lambda e: e.start_ns())
    timeline, live = [], 0
    for e in records:
        live += e.nbytes()  # negative for a free
        timeline.append((e.start_ns(), live))
    return timeline


def phase(trace: profile, name: str) -> tuple[int, int]:
    """(start, end) in ns of the last ``record_function(name)`` range in the trace."""
    ranges = [(e.start_ns(), e.start_ns() + e.duration_ns()) for e in trace.profiler.kineto_results.events()
              if e.name() == name]
    return ranges[-1]


def live_tensor_bytes() -> int:
    """Bytes of the storages that the live tensors of this process point at, each storage once: every
    tensor Python's garbage collector tracks (a DTensor's local shard among them; not the tensors only
    C++ holds, such as DDP's buckets, nor those ``gc.freeze()`` moved out of its lists), deduplicated by
    the storage's address. A storage resized to 0,
    as FSDP2 leaves a freed gathered weight, counts 0."""
    storages: dict[int, int] = {}
    for obj in gc.get_objects():
        if not isinstance(obj, torch.Tensor) or obj.device.type != "cpu" or obj.layout != torch.strided:
            continue
        try:
            storage = obj.untyped_storage()
            address = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # a wrapper such as DTensor: its local shard is counted
            continue
        if address:
            storages[address] = max(storages.get(address, 0), storage.nbytes())
    return sum(storages.values())


def live_at(timeline: list[tuple[int, int]], t: int) -> int:
    """Bytes live at time ``t`` of a ``live_bytes`` timeline."""
    return next((live for when, live in reversed(timeline) if when <= t), 0)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    """One step; returns the loss averaged over all ranks."""
    optimizer.zero_grad()
    with record_function("forward"):  # only a label: the profiler, when one runs, marks the forward
        loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return round(mean.item() / dist.get_world_size(), 6)


def step_times_in_turn(rank: int, strategies: list[str], rounds: int = 21, width: int = 256, layers: int = 4,
                       batch_size: int = 16, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """Times in ms of one training step of each strategy, for ``rounds`` rounds after two untimed
    ones: in each round every strategy steps once, in an order shuffled afresh (the same order on
    every rank), so the strategies share whatever else the machine is doing. Each step starts on
    every rank at once, after a barrier, and ends with ``train_step``'s loss all-reduce. Outside the
    profiler, which slows every operation it records.

    Returns {strategy: {"wall_ms": wall-clock times, "cpu_ms": CPU time of this rank's main thread
    (time.thread_time: the Python, the hooks and the arithmetic, not the waits, not gloo's threads)}}.
    """
    built = {s: wrap(make_deep_mlp(width, layers, seed), s, 1e-3) for s in strategies}
    times = {s: {"wall_ms": [], "cpu_ms": []} for s in strategies}
    order = list(built)
    for round_ in range(rounds + 2):
        random.Random(seed + round_).shuffle(order)  # seeded alike: every rank steps the same strategy
        for strategy in order:
            model, optimizer = built[strategy]
            x, y = batch(100 + round_, rank, batch_size, width, seed)
            dist.barrier()
            start, start_cpu = time.perf_counter(), time.thread_time()
            train_step(model, optimizer, x, y)
            wall, cpu = time.perf_counter() - start, time.thread_time() - start_cpu
            if round_ >= 2:  # the first two rounds warm up
                times[strategy]["wall_ms"].append(round(wall * 1000, 3))
                times[strategy]["cpu_ms"].append(round(cpu * 1000, 3))
    return times


def recording_buckets(state: list, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's own ``allreduce_hook``, after noting where the bucket's flat buffer lies in memory:
    (first byte's address, bytes)."""
    buffer = bucket.buffer()
    state.append((buffer.untyped_storage().data_ptr(), buffer.untyped_storage().nbytes()))
    return default_hooks.allreduce_hook(None, bucket)


def bucket_layout(model: nn.Module, buffers: list[tuple[int, int]]) -> dict:
    """Where the gradients lie against DDP's bucket buffers: how many storages hold them, whether
    each lies inside a bucket buffer, and the bytes of the buffers (the last step's)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    inside = [any(start <= g.data_ptr() and g.data_ptr() + g.nbytes <= start + size for start, size in buffers)
              for g in grads]
    return {"gradient_storages": len({g.untyped_storage().data_ptr() for g in grads}),
            "gradients_inside_buckets": all(inside), "buckets": len(buffers),
            "bucket_bytes": sum(size for _, size in buffers)}


def bytes_sent(payloads: list[tuple[str, int]], world_size: int) -> float:
    """Bytes one rank sends, on average, for these collectives in a ring of ``world_size`` ranks."""
    return sum(RING_FACTORS[kind](world_size) * size for kind, size in payloads)


class Checkpointed(nn.Module):
    """Runs ``block`` under activation checkpointing: its forward saves only its input, and backward
    runs the block's forward again to get what it needs."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


def forward_bytes(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The loss of one forward, and the bytes that forward allocated and still holds (measured with
    torch.profiler's allocation records): what stays alive until backward."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as trace:
        loss = nn.functional.mse_loss(model(x), y)
    timeline = live_bytes(trace)
    return loss, timeline[-1][1] if timeline else 0


def collectives_asked(result: dict) -> int:
    """How many collectives torch was asked for in one traced step of ``result`` (c10d's ops)."""
    return sum(count for name, count in result["collectives"].items() if name.startswith("c10d::"))


def in_words(collectives: dict[str, int]) -> str:
    """A traced step's collectives in words: what torch asked for (c10d's names), then what gloo ran."""
    words = {name: name.removeprefix("c10d::").strip("_").removesuffix("_base") for name in collectives}
    asked = {words[name].replace("allgather", "all_gather").replace("allreduce", "all_reduce"): n
             for name, n in collectives.items() if name.startswith("c10d::")}
    ran = {name.removeprefix("gloo:"): n for name, n in collectives.items() if name.startswith("gloo:")}
    return f"asked {asked}; gloo ran {ran}"
