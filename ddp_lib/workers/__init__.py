"""The workers: top-level functions ``fn(rank, world_size, *args)`` that run in every rank.

``WORKERS`` names the ones ``python -m ddp_lib run NAME`` can start. Each entry says where the
function lives, what it shows, and the command-line options that become its extra arguments,
in order. Modules are imported only when a worker is run.
"""

from __future__ import annotations

import importlib
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
