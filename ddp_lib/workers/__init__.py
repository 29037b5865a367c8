"""The workers: top-level functions ``fn(rank, world_size, *args)`` that run in every rank.

``WORKERS`` names the ones ``python -m ddp_lib run NAME`` can start. Each entry says where the
function lives, what it shows, and the command-line options that become its extra arguments,
in order. Modules are imported only when a worker is run.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Option:
    """A command-line option that becomes one positional argument of the worker."""

    flag: str
    type: type
    default: object
    help: str


@dataclass(frozen=True)
class Worker:
    target: str  # "module:function"
    summary: str
    options: tuple[Option, ...] = field(default_factory=tuple)

    def load(self) -> Callable:
        module, name = self.target.split(":")
        return getattr(importlib.import_module(module), name)


WORKERS: dict[str, Worker] = {
    "demo_basic": Worker(
        "ddp_lib.workers.basic:demo_basic",
        "the classic basic DDP example, corrected: one step, the same parameters on every rank",
        (Option("--seed", int, 0, "base seed; rank r uses seed + r"),),
    ),
    "raise_on_rank": Worker(
        "ddp_lib.workers.failures:raise_on_rank",
        "one rank raises ValueError: the error names the rank, the others are stopped",
        (Option("--bad-rank", int, 1, "the rank that raises"),),
    ),
    "hang_on_rank": Worker(
        "ddp_lib.workers.failures:hang_on_rank",
        "one rank never returns: --timeout turns the hang into an error",
        (Option("--bad-rank", int, 1, "the rank that hangs"),),
    ),
    "whoami": Worker(
        "ddp_lib.workers.collectives:whoami",
        "join a process group with an init method; each rank reports rank, world size, backend and store",
        (Option("--method", str, "env", "init method: env, tcp or file"),
         Option("--path", str, None, "for --method file: a store file path no other job uses")),
    ),
    "collectives": Worker(
        "ddp_lib.workers.collectives:run_collective",
        "run one collective; each rank returns its tensor before and after",
        (Option("--name", str, "all_reduce", "broadcast, all_reduce, reduce, all_gather, gather, scatter, "
                                              "reduce_scatter or all_to_all"),),
    ),
    "subgroups": Worker(
        "ddp_lib.workers.collectives:subgroups",
        "split the ranks into evens and odds with new_group and all-reduce within each",
    ),
    "ring": Worker(
        "ddp_lib.workers.ring:ring_check",
        "a ring all-reduce from send/recv, checked against dist.all_reduce, with the bytes each rank sent",
        (Option("--numel", int, 10, "number of elements in the tensor"),
         Option("--seed", int, 0, "base seed; rank r uses seed + r")),
    ),
    # Lesson 03: where tensors live.
    "input_placement": Worker(
        "ddp_lib.workers.placement:input_placement",
        "the classic example's forward: which device the model sees its CPU-made input on",
        (Option("--device-ids", str, "none", "'rank' passes device_ids=[rank] (ValueError on CPU), 'none' passes None"),
         Option("--move-inputs", int, 0, "1 moves the inputs to the rank's device first")),
    ),
    "where_am_i": Worker(
        "ddp_lib.workers.placement:where_am_i",
        "RANK, LOCAL_RANK, GROUP_RANK and the GPU a rank should use",
    ),
    "simulate_nodes": Worker(
        "ddp_lib.workers.placement:simulate_nodes",
        "run a worker as if the ranks were on several nodes (LOCAL_RANK etc. rewritten as torchrun would)",
        (Option("--nproc-per-node", int, 2, "processes per simulated node"),
         Option("--target", str, "ddp_lib.workers.placement:where_am_i", "module:function of the worker")),
    ),
    "checkpoint_devices": Worker(
        "ddp_lib.workers.placement:checkpoint_devices",
        "rank 0 saves a checkpoint; every rank loads it without and with map_location",
        (Option("--path", str, os.path.join(tempfile.gettempdir(), "ddp_lib_lesson03.pt"), "checkpoint file"),),
    ),
    "nccl_cpu_tensor": Worker(
        "ddp_lib.workers.placement:nccl_cpu_tensor",
        "GPU only: all-reduce a CPU tensor on nccl (fails: nccl needs CUDA tensors)",
    ),
    "without_set_device": Worker(
        "ddp_lib.workers.placement:without_set_device",
        "GPU only: nccl without torch.cuda.set_device, every rank on cuda:0 (fails)",
    ),
    "with_set_device": Worker(
        "ddp_lib.workers.placement:with_set_device",
        "GPU only: torch.cuda.set_device(local_rank) before init; each rank on its own GPU",
    ),
    # Lesson 04: what DDP does to parameters and gradients.
    "broadcast_at_construction": Worker(
        "ddp_lib.workers.gradients:broadcast_at_construction",
        "ranks start with different weights; DDP() makes them rank 0's",
        (Option("--seed", int, 0, "base seed; rank r uses seed + r"),),
    ),
    "grads_after_backward": Worker(
        "ddp_lib.workers.gradients:grads_after_backward",
        "after backward() every rank holds the mean of the ranks' gradients",
        (Option("--seed", int, 0, "seed of the model and data"), Option("--per-rank-batch", int, 4, "batch per rank")),
    ),
    "ddp_run": Worker(
        "ddp_lib.workers.gradients:ddp_run",
        "a few DDP steps; compare with gradients.single_process_run on the global batch",
        (Option("--per-rank-batch", int, 4, "batch per rank"), Option("--steps", int, 5, "SGD steps"),
         Option("--seed", int, 0, "seed"), Option("--reduction", str, "mean", "'mean' or 'sum' loss")),
    ),
    "no_sync_run": Worker(
        "ddp_lib.workers.gradients:no_sync_run",
        "gradient accumulation with no_sync: all-reduces per micro-batch",
        (Option("--per-rank-batch", int, 4, "batch per rank per step"),
         Option("--grad-accum-steps", int, 2, "micro-batches per step"), Option("--steps", int, 3, "SGD steps")),
    ),
    "unused_parameters": Worker(
        "ddp_lib.workers.gradients:unused_parameters",
        "a head that gets no gradient: the error, or find_unused_parameters=1",
        (Option("--find-unused-parameters", int, 0, "1 turns on unused parameter detection"),),
    ),
    "fp16_compression": Worker(
        "ddp_lib.workers.gradients:fp16_compression",
        "gradients with the default hook and with fp16_compress_hook",
    ),
    "scratch_vs_torch": Worker(
        "ddp_lib.workers.buckets:scratch_vs_torch",
        "DDP from scratch (after_backward, per_parameter_hooks, buckets) against torch's DDP",
        (Option("--way", str, "buckets", "after_backward, per_parameter_hooks, buckets or torch"),
         Option("--steps", int, 4, "SGD steps"), Option("--bucket-cap-mb", float, 0.001, "bucket size")),
    ),
    "count_allreduces": Worker(
        "ddp_lib.workers.buckets:count_allreduces",
        "all-reduces per step for a bucket_cap_mb",
        (Option("--bucket-cap-mb", float, 25.0, "bucket size in MiB"),),
    ),
    "backward_timeline": Worker(
        "ddp_lib.workers.buckets:backward_timeline",
        "timestamps of gradients ready and bucket all-reduces in one backward",
        (Option("--bucket-cap-mb", float, 0.3, "bucket size in MiB"),),
    ),
    "train": Worker(
        "ddp_lib.workers.train:train",
        "train a small classifier with DistributedSampler, averaged losses, checkpoints and resume",
        (Option("--epochs", int, 8, "number of epochs to reach (counting those already in a checkpoint)"),
         Option("--batch-size", int, 16, "samples per rank per step (global batch = world size x this)"),
         Option("--lr", float, 0.1, "learning rate (SGD with momentum 0.9)"),
         Option("--seed", int, 0, "seed of the initial weights and of the shuffle"),
         Option("--checkpoint-dir", str, "", "directory for rank 0's checkpoints ('' for none)"),
         Option("--resume", int, 0, "1: continue from the latest checkpoint in --checkpoint-dir, if any"),
         Option("--set-epoch", int, 1, "0: forget sampler.set_epoch (the same order every epoch)"),
         Option("--norm", str, "none", "none, batch (BatchNorm1d) or sync (statistics of the global batch)"),
         Option("--fail-at-epoch", int, 0, "the last rank raises at this epoch on a first attempt only (0: never)")),
    ),
    "torchrun_env": Worker(
        "ddp_lib.workers.torchrun_env:torchrun_env",
        "report the launch environment variables each rank sees (ports and addresses only as set/unset)",
    ),
}
