"""Three everyday mistakes of lesson 07, each run and then fixed, in the calling process: ``device_ids``
given for a model on the CPU, ``args=(2)`` instead of ``args=(2,)`` for ``mp.spawn``, and
``init_process_group`` on a port that an earlier run holds. Each function returns the lines to print."""

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
                lines.append(f"device_ids={device_ids}: ValueError: {e}")
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
    """``init_process_group`` on a port that an earlier run's store still holds fails with
    ``EADDRINUSE`` (torch's message is returned, its port number replaced by ``PORT``); once that run
    has stopped, the same call on the same port starts. The earlier run is a store in this process;
    the group is a group of one, which this function destroys again."""
    from datetime import timedelta

    import torch.distributed as dist

    lines = []
    earlier_run = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)  # port 0: any free port
    init_method = f"tcp://127.0.0.1:{earlier_run.port}"  # as MASTER_ADDR=127.0.0.1 MASTER_PORT=<its port>
    try:
        dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=1, timeout=timedelta(seconds=10))
        dist.destroy_process_group()
        lines.append("the same port: init_process_group started")
    except dist.DistNetworkError as e:
        message = re.sub(r"port: \d+", "port: PORT", str(e))  # the port changes from run to run
        lines.append(f"the same port: DistNetworkError: {message}")
    del earlier_run  # the earlier run stops: its store closes and frees the port
    dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=1, timeout=timedelta(seconds=10))
    try:
        lines.append("the earlier run stopped, the same port: init_process_group started, "
                     f"world size {dist.get_world_size()}")
    finally:
        dist.destroy_process_group()
    return lines
