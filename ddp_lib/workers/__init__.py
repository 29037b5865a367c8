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
}
