"""Three everyday mistakes of lesson 07, each run and then fixed, in the calling process: ``device_ids``
given for a model on the CPU, ``args=(2)`` instead of ``args=(2,)`` for ``mp.spawn``, and a second
store on a port that an earlier one holds. Each function returns the lines to print."""

from __future__ import annotations

import re


def device_ids_on_cpu() -> list[str]:
    """DDP of a CPU model given ``device_ids=[0]`` raises ``ValueError``; without it, DDP is built.
    Runs in a group of one, in this process, which it destroys again."""
    import torch
    import torch.distributed as dist

    lines = []
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for device_ids in ([0], None):
            try:
                torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1), device_ids=device_ids)
                lines.append(f"device_ids={device_ids}: DDP built")
            except ValueError as e:
                lines.append(f"device_ids={device_ids}: ValueError: {str(e).split(', but')[0]}")
    finally:
        dist.destroy_process_group()
    return lines


def spawn_args() -> list[str]:
    """``mp.spawn(fn, args=2)`` fails in the child at ``fn(i, *args)``; ``args=(2,)`` runs.
    One process each, running ``faulty_ranks.raise_on_rank(0, 2)``, which does not raise."""
    import torch.multiprocessing as mp

    from ddp_lib.workers import faulty_ranks

    lines = []
    for args in (2, (2,)):
        try:
            mp.spawn(faulty_ranks.raise_on_rank, args=args, nprocs=1)
            lines.append(f"args={args!r}: the process ran")
        except mp.ProcessRaisedException as e:
            last = str(e).strip().splitlines()
            lines.append(f"args={args!r}: {last[-1]} | in mp.spawn's child, at {last[-2].strip()}")
    return lines


def busy_port() -> list[str]:
    """A second store on the port an earlier store holds fails with ``EADDRINUSE``; a second store
    on port 0, which the operating system replaces by a free port, starts."""
    import torch.distributed as dist

    lines = []
    first = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)  # port 0: any free port
    try:
        for port, told in ((first.port, "the same port"), (0, "port 0")):
            try:
                second = dist.TCPStore("127.0.0.1", port, world_size=1, is_master=True)
                lines.append(f"{told}: the second store started, on another port: {second.port != first.port}")
                del second
            except dist.DistNetworkError as e:
                name = re.search(r"name: (\w+)", str(e))
                lines.append(f"{told}: DistNetworkError, {name.group(1) if name else str(e)[:80]}")
    finally:
        del first  # closes the first store and frees its port
    return lines
