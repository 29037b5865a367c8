"""Lesson 02, exercise 1: each rank's value back from mp.spawn through a queue. Exercise 2: a launch
plan for mp.spawn. Exercise 3: a script that runs under python with mp.spawn (SCRIPT, its text)."""

import torch.multiprocessing as mp

from ddp_lib.workers.spawning import record_args


def collect(fn, args, nprocs):
    results = mp.get_context("spawn").SimpleQueue()  # the default queue is fork's on Linux: mp.spawn refuses it
    context = mp.spawn(fn, args=(*args, results), nprocs=nprocs, join=False)  # returns at once
    values, ended = {}, False
    while not ended:
        ended = context.join(timeout=0.5)  # raises if a rank failed; True once every rank has ended
        while not results.empty():  # read while the ranks run: a large put waits for a reader
            rank, value = results.get()
            values[rank] = value
    missing = [rank for rank in range(nprocs) if rank not in values]
    if missing:  # a rank that ended well without its put
        raise RuntimeError(f"ranks {missing} put no value")
    return [values[rank] for rank in range(nprocs)]


def plan_launch(world_size: int, out_dir: str) -> dict:
    # The worker imported from a module; args holds what follows the rank, as a tuple (note the comma).
    return dict(fn=record_args, args=(world_size, out_dir), nprocs=world_size)


# Exercise 3: the launch, and the loading, go under the guard; the worker stays at the top level,
# where each child, which runs the file again as __mp_main__, finds it.
SCRIPT = '''import torch.multiprocessing as mp


def work(rank, world_size):
    print(f"rank {rank} of {world_size} works", flush=True)


if __name__ == "__main__":
    print("loading the data set ...", flush=True)  # slow in a real job: it should run once
    mp.spawn(work, args=(2,), nprocs=2)
    print("all ranks done", flush=True)
'''
