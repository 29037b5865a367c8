"""The workers: top-level functions ``fn(rank, world_size, ...)`` that run in every rank.

``WORKERS`` names the ones ``python -m ddp_lib run NAME`` can start: where each function lives
and one line on what it shows. Their command-line options are not listed here: the command
line reads them from each function's signature, annotations and docstring
(:mod:`ddp_lib.launch._worker_params`), so they cannot drift apart. Modules are imported only when a
worker is run or its options are asked for.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Worker:
    target: str  # "module:function"
    summary: str

    def load(self) -> Callable:
        return pkgutil.resolve_name(self.target)


WORKERS: dict[str, Worker] = {
    "demo_basic": Worker("ddp_lib.workers.basic:demo_basic",
        "the classic basic DDP example, corrected: one step, the same parameters on every rank"),
    "raise_on_rank": Worker("ddp_lib.workers.faulty_ranks:raise_on_rank",
        "one rank raises ValueError: the error names the rank, the others are stopped"),
    "hang_on_rank": Worker("ddp_lib.workers.faulty_ranks:hang_on_rank",
        "one rank never returns: --timeout turns the hang into an error"),
    "whoami": Worker("ddp_lib.workers.collectives:whoami",
        "join a process group with an init method; each rank reports rank, world size, backend and store"),
    "collectives": Worker("ddp_lib.workers.collectives:run_collective",
        "run one collective; each rank returns its tensor before and after"),
    "subgroups": Worker("ddp_lib.workers.collectives:subgroups",
        "split the ranks into evens and odds with new_group and all-reduce within each"),
    "ring": Worker("ddp_lib.workers.ring:ring_check",
        "a ring all-reduce from send/recv, checked against dist.all_reduce, with the bytes each rank sent"),
    "input_placement": Worker("ddp_lib.workers.placement:input_placement",
        "the classic example's forward: which device the model sees its CPU-made input on"),
    "where_am_i": Worker("ddp_lib.workers.placement:where_am_i",
        "RANK, LOCAL_RANK, GROUP_RANK and the GPU a rank should use"),
    "simulate_nodes": Worker("ddp_lib.workers.placement:simulate_nodes",
        "run a worker as if the ranks were on several nodes (LOCAL_RANK etc. rewritten as torchrun would)"),
    "checkpoint_devices": Worker("ddp_lib.workers.placement:checkpoint_devices",
        "rank 0 saves a checkpoint; every rank loads it without and with map_location"),
    "nccl_cpu_tensor": Worker("ddp_lib.workers.placement:nccl_cpu_tensor",
        "GPU only: all-reduce a CPU tensor on nccl (fails: nccl needs CUDA tensors)"),
    "without_set_device": Worker("ddp_lib.workers.placement:without_set_device",
        "GPU only: nccl without torch.cuda.set_device, every rank on cuda:0 (fails)"),
    "with_set_device": Worker("ddp_lib.workers.placement:with_set_device",
        "GPU only: torch.cuda.set_device(rank) before init, no device_id=; each rank on its own GPU"),
    "broadcast_at_construction": Worker("ddp_lib.workers.gradients:broadcast_at_construction",
        "ranks start with different weights; DDP() makes them rank 0's"),
    "grads_after_backward": Worker("ddp_lib.workers.gradients:grads_after_backward",
        "after backward() every rank holds the mean of the ranks' gradients"),
    "ddp_run": Worker("ddp_lib.workers.gradients:ddp_run",
        "a few DDP steps; compare with gradients.single_process_run on the global batch"),
    "no_sync_run": Worker("ddp_lib.workers.gradients:no_sync_run",
        "gradient accumulation with no_sync: all-reduces per micro-batch"),
    "unused_parameters": Worker("ddp_lib.workers.gradients:unused_parameters",
        "a head that gets no gradient: the error, or --find-unused-parameters"),
    "fp16_compression": Worker("ddp_lib.workers.gradients:fp16_compression",
        "gradients with the default hook and with fp16_compress_hook"),
    "scratch_vs_torch": Worker("ddp_lib.workers.buckets:scratch_vs_torch",
        "DDP from scratch (after_backward, per_parameter_hooks, buckets) against torch's DDP"),
    "count_allreduces": Worker("ddp_lib.workers.buckets:count_allreduces",
        "all-reduces per step for a bucket_cap_mb"),
    "backward_timeline": Worker("ddp_lib.workers.buckets:backward_timeline",
        "timestamps of gradients ready and bucket all-reduces in one backward"),
    "hello": Worker("ddp_lib.workers.spawning:hello",
        "return a greeting naming the rank"),
    "describe_rank": Worker("ddp_lib.workers.spawning:describe_rank",
        "what each rank is told (arguments, RANK, WORLD_SIZE, MASTER_ADDR/PORT), checked by an all-reduce"),
    "fail_on_rank": Worker("ddp_lib.workers.spawning:fail_on_rank",
        "raise ValueError on one rank, to see how a worker's error reaches the caller"),
    "chatty": Worker("ddp_lib.workers.spawning:chatty",
        "print a few lines per rank; the launcher shows them afterwards in rank order"),
    "train": Worker("ddp_lib.demos.training_runs:train_with_switches",
        "train a small classifier with DistributedSampler, averaged losses, checkpoints and resume"),
    "template": Worker("ddp_lib.workers.template:train_job",
        "a template for your own job: your model and data, then the DDP loop, evaluation, checkpoint, resume"),
    "torchrun_env": Worker("ddp_lib.workers.torchrun_env:torchrun_env",
        "report the launch environment variables each rank sees (ports and addresses only as set/unset)"),
}
