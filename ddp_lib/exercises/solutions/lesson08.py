"""Lesson 08, exercises 1 and 2: busbw from algbw, and a measured all-reduce bandwidth."""

import time

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group


def busbw(algbw: float, world_size: int) -> float:
    # A ring all-reduce sends 2(N-1)/N times the tensor over each rank's link.
    return algbw * 2 * (world_size - 1) / world_size


def measure_allreduce(rank: int, world_size: int, nbytes: int) -> dict:
    with process_group(rank, world_size):
        tensor = torch.ones(nbytes // 4)  # float32: 4 bytes per element
        dist.all_reduce(tensor)  # warm-up: the first call sets up connections
        dist.barrier()  # start together, so no rank's time includes waiting for a late one
        start = time.perf_counter()
        dist.all_reduce(tensor)
        elapsed = torch.tensor([time.perf_counter() - start])
        # The all-reduce is done only when the slowest rank is: every rank returns that rank's time.
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = elapsed.item()
        algbw = nbytes / seconds / 1e9
        return {"seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": busbw(algbw, world_size)}
