"""Lesson 01's workers: joining a process group three ways, a store, every collective, subgroups.

Each collective starts from the same tensors: rank r holds [10 r + 1, 10 r + 2, ..., 10 r + N]
(N = world_size <= 9), so every value says which rank it came from (its tens digit) and which
slot (its last digit).
"""

from __future__ import annotations

import inspect
import os
import textwrap
import time
from datetime import timedelta
from multiprocessing.queues import SimpleQueue
from pathlib import Path
from typing import Literal, get_args

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
    from ddp_lib.workers.shared import start_tensor
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group
    from shared import start_tensor

Collective = Literal["broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
                     "all_to_all"]
COLLECTIVES = get_args(Collective)
InitMethod = Literal["env", "tcp", "file"]


def join_and_sum(rank: int, world_size: int) -> dict:
    """Plain torch, as a learner writes it: join the group, all-reduce the ranks, leave the group."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # reads MASTER_ADDR, MASTER_PORT
    try:
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)  # every rank receives the sum over all ranks
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": dist.get_backend(),
                "sum_of_ranks": total.item()}
    finally:
        dist.destroy_process_group()


def join_and_put(rank: int, world_size: int, results: SimpleQueue) -> None:
    """For torch.multiprocessing.spawn, which drops what a worker returns: run join_and_sum and put its
    result in ``results``, a queue that the launching process reads."""
    results.put(join_and_sum(rank, world_size))


def join_from_env(rank: int, world_size: int) -> float:
    """Plain torch, with no rank= and no world_size=: env:// then reads them from RANK and WORLD_SIZE,
    which ddp_lib.mp.labelled_spawn and torchrun set and torch.multiprocessing.spawn does not."""
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    try:
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)  # every rank receives the sum over all ranks
        return total.item()
    finally:
        dist.destroy_process_group()


def join_with_url(rank: int, world_size: int, url: str) -> float:
    """Plain torch: join the group through the init method ``url``, all-reduce the ranks, leave."""
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world_size)
    try:
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)  # every rank receives the sum over all ranks
        return total.item()
    finally:
        dist.destroy_process_group()


def broadcast_from_0(rank: int, world_size: int) -> dict:
    """Plain torch, as a learner writes it: join the group, broadcast rank 0's tensor, leave."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # reads MASTER_ADDR, MASTER_PORT
    try:
        mine = torch.arange(1.0, world_size + 1) + 10 * rank  # rank r: [10r + 1, ..., 10r + world_size]
        before = mine.tolist()
        dist.broadcast(mine, src=0)  # in place: rank 0's tensor overwrites everyone's
        dist.barrier()  # leave together: a slower rank may still be in init, reading the store rank 0 serves
        return {"name": "broadcast", "rank": rank, "before": before, "after": mine.tolist(), "defined": True}
    finally:
        dist.destroy_process_group()


def whoami(rank: int | None = None, world_size: int | None = None, method: InitMethod = "env",
           path: str | None = None) -> dict:
    """Join the group with init method ``method``; return this rank's view of it: rank, world
    size, backend, the store underneath and the all-reduced sum of the ranks.

    Args:
        method: init method: env, tcp or file.
        path: for method file: a store file path no other job uses.
    """
    with process_group(rank, world_size, init_method=init_method_url(method, path)) as device:
        store = distributed_c10d._get_default_store()  # private: used here only to name it
        while hasattr(store, "underlying_store"):  # PrefixStores namespace the keys of each group
            store = store.underlying_store
        total = torch.tensor([float(dist.get_rank())], device=device)
        dist.all_reduce(total)
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": dist.get_backend(),
                "init_method": method + "://", "store": type(store).__name__, "sum_of_ranks": total.item()}


def store_demo(rank: int, world_size: int, path: str) -> dict:
    """Plain torch: use a FileStore by hand (set, wait, get, add), then build the process group on it."""
    store = dist.FileStore(path, world_size)  # every rank opens the same file
    store.set(f"hello/{rank}", f"rank {rank} is here")
    # wait() blocks until every key exists: the simplest rendezvous (torchrun's adds membership and restarts).
    keys = [f"hello/{r}" for r in range(world_size)]
    store.wait(keys, timedelta(seconds=30))
    seen = [store.get(key).decode() for key in keys]
    arrival = store.add("arrivals", 1)  # atomic counter: 1..world_size, in arrival order
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    try:
        total = torch.tensor([float(rank)])
        dist.all_reduce(total)  # done: every rank has connected, so every rank's address key is in the store
        # The keys init_process_group added, under the group's name ("0"): gloo's address of each rank.
        group_keys = sorted(k for k in store.list_keys() if k.startswith(f"{dist.group.WORLD.group_name}/"))
        return {"rank": rank, "seen": seen, "arrival": arrival, "arrival_in_range": 1 <= arrival <= world_size,
                "sum_of_ranks": total.item(), "group_keys": group_keys}
    finally:
        dist.destroy_process_group()


def run_collective(rank: int | None = None, world_size: int | None = None, name: Collective = "all_reduce") -> dict:
    """Run one collective on the lesson's starting tensors; return this rank's tensor before and
    after (None where the rank has no tensor), and whether "after" is defined on this rank.

    Args:
        name: the collective to run.
    """
    return run_collectives(rank, world_size, (name,))[name]


def run_collectives(rank: int | None = None, world_size: int | None = None,
                    names: tuple[str, ...] = COLLECTIVES) -> dict[str, dict]:
    """Run each collective in ``names``, in order, in one process group, each on fresh starting
    tensors; return {name: what run_collective returns}."""
    unknown = [name for name in names if name not in COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective {unknown[0]!r}; accepted: {', '.join(COLLECTIVES)}")
    with process_group(rank, world_size) as device:
        return {name: _collective(name, dist.get_rank(), dist.get_world_size(), device) for name in names}


def barrier_timeline(rank: int | None = None, world_size: int | None = None, delay: float = 0.1,
                     broadcast: bool = False) -> dict:
    """Arrive at a barrier ``delay * rank`` seconds late; return when this rank arrived and left
    (wall-clock seconds, comparable across processes on one machine). With ``broadcast``, then time
    a broadcast from rank 0 that only the last rank reaches late: ``broadcast_arrived``, ``broadcast_left``."""
    with process_group(rank, world_size):
        rank = dist.get_rank()
        dist.barrier()  # line everyone up first, so the delays below are the only difference
        time.sleep(delay * rank)
        arrived = time.time()
        dist.barrier()
        timeline = {"rank": rank, "arrived": arrived, "left": time.time()}
        if broadcast:
            dist.barrier()
            if rank == dist.get_world_size() - 1:
                time.sleep(delay * rank)  # only the last rank is late this time
            timeline["broadcast_arrived"] = time.time()
            dist.broadcast(torch.zeros(1), src=0)
            timeline["broadcast_left"] = time.time()
            dist.barrier()  # leave together: a rank may return from broadcast before the others arrive
        return timeline


def subgroups(rank: int | None = None, world_size: int | None = None, local: bool = False) -> dict:
    """Split the ranks into evens and odds with new_group; all-reduce each rank's number within
    its own subgroup only.

    Args:
        local: each rank creates only its own group, with use_local_synchronization=True.
    """
    with process_group(rank, world_size) as device:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        mine = list(range(rank % 2, world_size, 2))
        if local:
            # Only the members call new_group: the group is named by a hash of its ranks and of how
            # many groups this process holds, not by the counter below. So the other ranks need not
            # take part, as long as every member holds as many groups as its peers.
            group = dist.new_group(mine, use_local_synchronization=True)
        else:
            # Every rank calls every new_group, in the same order (why: lesson 01, section 8).
            evens = dist.new_group(list(range(0, world_size, 2)))
            odds = dist.new_group(list(range(1, world_size, 2)))
            group = evens if rank % 2 == 0 else odds
        total = torch.tensor([float(rank)], device=device)
        dist.all_reduce(total, group=group)
        # Two numberings of one receiver: group_dst= counts within the group, dst= in the default group.
        sender = torch.tensor([float(rank)], device=device)
        pair = dist.get_world_size(group) > 1  # on 2 ranks each group has one member
        if pair and dist.get_rank(group) == 0:
            dist.send(sender, group=group, group_dst=1)
        elif pair and dist.get_rank(group) == 1:
            dist.recv(sender, group=group, group_src=0)
        dist.barrier()  # leave together: rank 0 serves the store, where the other group may still meet
        return {"rank": rank, "group": "evens" if rank % 2 == 0 else "odds", "group_name": group.group_name,
                "members": dist.get_process_group_ranks(group), "group_rank": dist.get_rank(group),
                "group_size": dist.get_world_size(group), "sum": total.item(),
                "group_rank_1_is": dist.get_global_rank(group, 1) if pair else None,
                "received_from": int(sender.item())}


# ---- helpers


def init_method_url(method: InitMethod, path: str | None = None) -> str:
    """The init_method string for "env", "tcp" or "file" (file needs a path no other job uses)."""
    if method == "env":
        return "env://"  # read MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the environment
    if method == "tcp":
        # The address in the URL: under mp.spawn rank 0 serves the store there, under torchrun the agent.
        return f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}"
    if method == "file":
        if not path:
            raise ValueError("init method 'file' needs a path to a file all ranks can reach")
        return Path(path).resolve().as_uri()  # an absolute path; on Windows e.g. file:///D:/jobs/ddp_store
    raise ValueError(f"unknown init method {method!r}; accepted: 'env', 'tcp', 'file'")


def _collective(name: str, rank: int, world_size: int, device: torch.device) -> dict:
    mine = start_tensor(rank, world_size, device)
    before, after, defined = mine.tolist(), None, True
    if name == "broadcast":
        dist.broadcast(mine, src=0)  # in place: rank 0's tensor overwrites everyone's
        after = mine.tolist()
    elif name == "all_reduce":
        dist.all_reduce(mine, op=dist.ReduceOp.SUM)
        after = mine.tolist()
    elif name == "reduce":
        dist.reduce(mine, dst=0, op=dist.ReduceOp.SUM)
        # Only dst gets the sum; gloo uses the others' tensors as scratch space.
        after, defined = mine.tolist(), rank == 0
    elif name == "all_gather":
        pieces = [torch.empty_like(mine) for _ in range(world_size)]  # made beforehand: one per rank, filled
        dist.all_gather(pieces, mine)
        after = torch.cat(pieces).tolist()
    elif name == "gather":
        pieces = [torch.empty_like(mine) for _ in range(world_size)] if rank == 0 else None  # None off dst
        dist.gather(mine, gather_list=pieces, dst=0)
        after = torch.cat(pieces).tolist() if rank == 0 else None
    elif name == "scatter":
        # Rank 0 deals out its tensor, one slot to each rank; the others only receive.
        before = mine.tolist() if rank == 0 else None
        pieces = list(mine.chunk(world_size)) if rank == 0 else None
        received = torch.empty(1, device=device)  # made beforehand, on every rank
        dist.scatter(received, scatter_list=pieces, src=0)
        after = received.tolist()
    elif name == "reduce_scatter":
        received = torch.empty(1, device=device)  # made beforehand: this rank's piece of the sum
        dist.reduce_scatter(received, list(mine.chunk(world_size)), op=dist.ReduceOp.SUM)
        after = received.tolist()
    elif name == "all_to_all":
        received = [torch.empty(1, device=device) for _ in range(world_size)]  # one piece from each rank
        dist.all_to_all(received, list(mine.chunk(world_size)))
        after = torch.cat(received).tolist()
    return {"name": name, "rank": rank, "before": before, "after": after, "defined": defined}


def call_source(name: Collective) -> str:
    """The lines of ``_collective`` that run the collective ``name``, dedented: the plain-torch call,
    with the tensors or lists it fills. ``mine`` is the rank's start tensor; ``after`` is what the
    lesson prints."""
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {name!r}; accepted: {', '.join(COLLECTIVES)}")
    lines = inspect.getsource(_collective).splitlines()
    heads = (f'if name == "{name}":', f'elif name == "{name}":')
    start = next(i for i, line in enumerate(lines) if line.strip() in heads)
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return textwrap.dedent("\n".join(body)).strip("\n")


def _fmt(values: list | None) -> str:
    if values is None:
        return "-"
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def describe(results: list[dict]) -> str:
    """One line per rank, in rank order: the tensor before and after a collective."""
    lines = [results[0]["name"]]
    for r in results:
        # A reduce's non-destination tensors are printed as they were left, to show they are not the sum.
        after = _fmt(r["after"]) + ("" if r["defined"] else " (scratch space: do not read)")
        lines.append(f"  rank {r['rank']}: {_fmt(r['before']):<20} -> {after}")
    return "\n".join(lines)
