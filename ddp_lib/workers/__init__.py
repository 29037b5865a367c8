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
    # lesson 02: how processes are started
    "hello": Worker("ddp_lib.workers.spawning:hello", "return a greeting naming the rank"),
    "describe_rank": Worker(
        "ddp_lib.workers.spawning:describe_rank",
        "what each rank is told (arguments, RANK, WORLD_SIZE, MASTER_ADDR/PORT), checked by an all-reduce",
    ),
    "fail_on_rank": Worker(
        "ddp_lib.workers.spawning:fail_on_rank",
        "raise ValueError on one rank, to see how a worker's error reaches the caller",
        (Option("--bad-rank", int, 1, "the rank that raises"),),
    ),
    "chatty": Worker(
        "ddp_lib.workers.spawning:chatty",
        "print a few lines per rank; the launcher shows them afterwards in rank order",
        (Option("--lines", int, 3, "lines each rank prints"),),
    ),
}
