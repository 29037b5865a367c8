"""Workers for lesson 02 (how processes are started). Each is a top-level function, so child
processes can import it by name; each takes the rank (or mp.spawn's process index) first.

``record_args`` is for a raw ``torch.multiprocessing.spawn`` call, which drops return values:
it writes what it was called with to a file instead. The others run under ddp_lib's launcher,
raw ``mp.spawn`` and torchrun alike.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:  # inside the ddp_lib package
    from ddp_lib.process_group import env_int, process_group, teardown
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import env_int, process_group, teardown


def record_args(i: int, world_size: int, out_dir: str) -> None:
    """Write the arguments this process was called with to ``out_dir/call-<i>.json``."""
    call = {"i": i, "world_size": world_size, "pid": os.getpid()}
    with open(os.path.join(out_dir, f"call-{i}.json"), "w") as f:
        json.dump(call, f)


def hello(rank: int, world_size: int) -> str:
    """Return a greeting naming this rank: the worker a notebook cannot define for itself."""
    return f"hello from rank {rank} of {world_size}"


def echo_args(rank: int, *args, **kwargs) -> dict:
    """Return what this process was called with: its index, then ``args`` and ``kwargs``."""
    return {"rank": rank, "args": list(args), "kwargs": kwargs}


def noop(rank: int, *args) -> None:
    """Do nothing: a launch of this measures only the cost of starting processes."""


def describe_rank(rank: int | None = None, world_size: int | None = None) -> dict:
    """Join the process group, all-reduce ``rank + 1``, and return what this rank was told:
    its arguments, its environment variables and the all-reduced sum."""
    rank = env_int("RANK") if rank is None else rank
    world_size = env_int("WORLD_SIZE") if world_size is None else world_size
    with process_group(rank, world_size) as device:
        total = torch.tensor([rank + 1.0], device=device)
        dist.all_reduce(total)  # proves the rendezvous worked: every rank took part
        return {
            "rank": rank,
            "world_size": world_size,
            "RANK": os.environ.get("RANK"),
            "LOCAL_RANK": os.environ.get("LOCAL_RANK"),
            "WORLD_SIZE": os.environ.get("WORLD_SIZE"),
            "MASTER_ADDR": os.environ.get("MASTER_ADDR"),
            "MASTER_PORT": int(os.environ["MASTER_PORT"]),
            "pid": os.getpid(),
            "sum": int(total.item()),
        }


def fail_on_rank(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """Raise ValueError on ``bad_rank``; every other rank returns its rank.

    Args:
        bad_rank: the rank that raises.
    """
    if rank == bad_rank:
        raise ValueError(f"rank {rank} of {world_size} was told to fail")
    return rank


def chatty(rank: int, world_size: int, lines: int = 3) -> int:
    """Print ``lines`` lines, pausing between them so that ranks interleave; return ``lines``.

    Args:
        lines: lines each rank prints.
    """
    for k in range(lines):
        print(f"rank {rank} of {world_size}: line {k}", flush=True)
        time.sleep(0.01)
    return lines


def step_fails_on_rank(rank: int, world_size: int, init_method: str, bad_rank: int = 1) -> None:
    """One DDP step shaped like lesson 02's script, in which ``bad_rank`` raises between forward
    and backward. The barrier is on the success path only, and ``finally`` only leaves the group,
    so the failing rank exits at once and its launcher can report it.

    Args:
        init_method: where the ranks meet, e.g. ``tcp://127.0.0.1:PORT``.
        bad_rank: the rank that raises.
    """
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    try:
        torch.manual_seed(rank)
        model = DistributedDataParallel(nn.Linear(10, 5))
        loss = model(torch.randn(20, 10)).sum()
        if rank == bad_rank:
            raise ValueError(f"rank {rank} of {world_size} fails in its step")
        loss.backward()  # the other ranks wait here for the failed rank's gradients
        dist.barrier()  # success path only: a barrier in `finally` would keep the failed rank waiting
    finally:
        dist.destroy_process_group()  # error or not; no collective here


# ---- helpers


def read_calls(out_dir: str) -> list[dict]:
    """The calls ``record_args`` wrote to ``out_dir``, sorted by the process index ``i``."""
    calls = []
    for name in os.listdir(out_dir):
        if name.startswith("call-") and name.endswith(".json"):
            with open(os.path.join(out_dir, name)) as f:
                calls.append(json.load(f))
    return sorted(calls, key=lambda call: call["i"])


def exit_early(rank: int, how: str) -> None:
    """End this process before ``fn`` returns: ``how="exit"`` calls ``sys.exit(3)``, ``how="kill"``
    sends this process SIGKILL. Either way torch's launcher finds no error file, and raises
    ``ProcessExitedException`` with the exit code or the signal."""
    if how == "exit":
        sys.exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def hang(rank: int, seconds: float = 3600.0) -> None:
    """Sleep ``seconds``: a rank that does not finish, for a launcher's deadline to stop."""
    time.sleep(seconds)


def step_shared_model(rank: int, model: nn.Module, lr: float) -> None:
    """One SGD step with every gradient 1 on ``model``, which came in ``args``: on CPU, every
    rank's model is the parent's, so each rank's step lands on the same weights."""
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    torch.optim.SGD(model.parameters(), lr=lr).step()


def ddp_step_shared_model(rank: int, world_size: int, init_method: str, model: nn.Module) -> None:
    """One DDP step (input ``torch.ones(4, 1)``, loss ``.sum()``, SGD with lr 0.1) on ``model``,
    which came in ``args``: on CPU every rank's model is the parent's, so the averaged step
    lands on the same weights once per rank. The ranks step in rank order, so no two steps overlap
    and the result is exact. It ends with ``teardown`` (``ddp_lib.process_group``): see its docstring."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    try:
        ddp_model = DistributedDataParallel(model)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        ddp_model(torch.ones(4, 1)).sum().backward()
        for turn in range(world_size):  # the ranks step one after the other
            if rank == turn:
                optimizer.step()
            dist.barrier()
    finally:
        # a demo helper: your scripts end with dist.destroy_process_group(), as section 4's script does
        teardown()  # why the short pause: section 4, "Deeper: ... the rare abort at exit"


def hello_to_queue(rank: int, world_size: int, results) -> None:
    """Put ``(rank, hello(rank, world_size))`` in ``results``, a queue: a launcher that drops
    return values (torch's ``mp.spawn``) still gets the value back."""
    results.put((rank, hello(rank, world_size)))


def bytes_to_queue(rank: int, nbytes: int, results) -> None:
    """Put ``(rank, bytes(nbytes))`` in ``results``, a queue. Over about 64 KiB (a pipe's size on
    Linux), the ``put`` waits until the parent reads: the parent must ``get()`` before it joins."""
    results.put((rank, bytes(nbytes)))


def rank_from_environment(rank: int) -> int:
    """Return ``int(os.environ["RANK"])``, as code written for torchrun reads its rank: a
    ``KeyError`` under a launcher that does not set ``RANK`` (torch's ``mp.spawn``)."""
    return int(os.environ["RANK"])


def log_then_fail(rank: int, world_size: int, init_method: str, log_dir: str) -> None:
    """Rank 0 prints one line to its standard output, sent to ``log_dir/rank0.out`` and not
    flushed, then writes two lines to ``log_dir/rank0.log``, only the first flushed, then waits for
    the other ranks in ``init_process_group``. Every other rank raises once rank 0's first log line
    is in the file, before it reaches ``init_process_group``: rank 0 waits until its launcher stops it."""
    log_path = os.path.join(log_dir, "rank0.log")
    if rank != 0:
        while not (os.path.exists(log_path) and os.path.getsize(log_path) > 0):  # rank 0 has logged
            time.sleep(0.01)
        raise ValueError(f"rank {rank} failed before init_process_group")
    sys.stdout = open(os.path.join(log_dir, "rank0.out"), "w")  # standard output to a file, as `> rank0.out` does
    print("rank 0: a print, not flushed")  # plain print(): held in this process until a flush
    with open(log_path, "w") as log:  # a job's log: a file
        print("rank 0: line 1, flushed", file=log, flush=True)
        print("rank 0: line 2, not flushed", file=log)  # held in this process until a flush
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)  # waits
