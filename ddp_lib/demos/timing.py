"""Lesson 08's first timer, in plain torch: one all-reduce per size, timed after a warm-up and a
barrier, and the slowest rank's time kept (a collective is done only when every rank is done)."""

import os
import time

import torch
import torch.distributed as dist


def time_allreduce(rank: int, world_size: int, port: int, sizes: list[int]) -> list[tuple[int, float]]:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    times = []
    for nbytes in sizes:
        tensor = torch.ones(nbytes // 4)  # float32: 4 bytes each
        dist.all_reduce(tensor)  # warm-up: one-time costs (cold caches; with nccl, creating its communicator)
        dist.barrier()  # start within about one message latency of each other
        start = time.perf_counter()
        dist.all_reduce(tensor)
        seconds = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank's time
        times.append((nbytes, seconds.item()))
    dist.destroy_process_group()
    return times


def time_allreduce_to_queue(rank: int, world_size: int, port: int, sizes: list[int], results) -> None:
    """``time_allreduce`` for torch's ``mp.spawn``, which returns nothing: each rank puts (rank, its times)
    in ``results``, a queue from ``mp.get_context("spawn").SimpleQueue()``."""
    results.put((rank, time_allreduce(rank, world_size, port, sizes)))
