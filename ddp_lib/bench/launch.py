"""Launch cost: init, one 4 KiB all-reduce and teardown on N ranks, started by
``ddp_lib.launch.spawn`` and by a plain ``torch.multiprocessing.spawn``, in the same run.

    python -m ddp_lib bench launch [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddp_lib.bench.stats import median_seconds
from ddp_lib.launch import spawn
from ddp_lib.process_group import free_port, process_group


def allreduce_once(rank: int, world_size: int) -> float:
    """The work both launchers start: join, all-reduce 1024 floats, leave."""
    with process_group(rank, world_size):
        t = torch.ones(1024)
        dist.all_reduce(t)
        return t[0].item()


def _plain_mp_spawn(world_size: int) -> None:
    # What the classic example does: a port in the environment, rank 0 hosts the store.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    mp.spawn(allreduce_once, args=(world_size,), nprocs=world_size, join=True)


def measure(world_sizes: tuple[int, ...] = (2, 4), repeats: int = 5) -> list[dict]:
    rows = []
    for world_size in world_sizes:
        plain = median_seconds(functools.partial(_plain_mp_spawn, world_size), repeats)
        ours = median_seconds(functools.partial(spawn, allreduce_once, world_size, show_output=False), repeats)
        rows.append({"world_size": world_size, "mp_spawn_s": round(plain, 4), "ddp_lib_s": round(ours, 4),
                     "ratio": round(ours / plain, 4)})
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_lib bench launch", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args(argv)
    rows = measure(repeats=opts.repeats)
    if opts.json:
        print(json.dumps(rows))
        return 0
    print(f"launch + init + 4 KiB all_reduce + teardown, median of {opts.repeats} after 1 warm-up")
    print(f"{'ranks':>5}  {'mp.spawn (s)':>12}  {'ddp_lib (s)':>11}  {'ddp_lib / mp.spawn':>18}")
    for row in rows:
        print(f"{row['world_size']:>5}  {row['mp_spawn_s']:>12.3f}  {row['ddp_lib_s']:>11.3f}  {row['ratio']:>18.1%}")
    return 0
