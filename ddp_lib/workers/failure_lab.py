"""The classic distributed failures, each reproduced on purpose for lesson 07.

Every worker fails fast: process groups get a short timeout, so a hang becomes an error within
seconds. Each returns (or raises) what the lesson shows; the fixed variants return normally.
"""

from __future__ import annotations

import faulthandler
import ipaddress
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import process_group

SHORT = timedelta(seconds=3)


def evaluate_on_rank0_only(rank: int, world_size: int, fixed: bool = False) -> float:
    """Rank 0 "evaluates" with an all_reduce while the other ranks are busy elsewhere: it waits in
    the collective until the group's timeout (3 s here). ``fixed`` has every rank take part."""
    with process_group(rank, world_size, timeout=SHORT):
        metric = torch.tensor([float(rank + 1)])
        if fixed or rank == 0:
            dist.all_reduce(metric)
        else:
            time.sleep(30)  # training on; the launcher stops this rank once rank 0 has failed
        return metric.item()


def stray_after_peers_wait(rank: int, world_size: int, evaluate_s: float = 1.0) -> float:
    """Rank 0 "evaluates" for ``evaluate_s``, then all-reduces its metric alone; the other ranks go
    straight to ``dist.barrier()``. They wait first, so they time out first and exit: rank 0, the rank
    with the extra collective, then fails with a lost connection, not a timeout."""
    with process_group(rank, world_size, timeout=SHORT):
        metric = torch.tensor([float(rank + 1)])
        if rank == 0:
            time.sleep(evaluate_s)  # the evaluation's own work
            dist.all_reduce(metric)  # the stray collective: no other rank calls it
        dist.barrier()
        return metric.item()


def metric_on_rank0_in_ddp_loop(rank: int, world_size: int, steps: int = 3) -> list[float]:
    """A real DDP loop whose rank 0 all-reduces a one-number metric after step 0, alone. The other
    ranks go on to step 1, whose forward runs DDP's one-time bucket rebuild (two broadcasts from
    rank 0): that is the call rank 0's metric all-reduce meets, and both wait until the timeout."""
    faulthandler.enable()  # a crash in C++ (SIGSEGV) then prints this rank's Python stack to its stderr
    with process_group(rank, world_size, timeout=SHORT):
        torch.manual_seed(0)
        ddp = DDP(nn.Linear(4, 1))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(steps):
            loss = ddp(torch.full((8, 4), float(rank + 1))).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step == 0 and rank == 0:
                metric = torch.tensor([1.0])  # rank 0's own metric; with 2 ranks the sum should be 2
                dist.all_reduce(metric)
                print(f"rank 0's metric all_reduce returned {metric.item():.4g}", flush=True)
        return [p.detach().flatten().tolist() for p in ddp.parameters()]


def metric_on_rank0_with_checked_group(rank: int, world_size: int, steps: int = 3) -> list[float]:
    """The loop of :func:`metric_on_rank0_in_ddp_loop`, run with ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
    and the workaround for DDP's crash on a checked group: the level is read when a group is created,
    so DDP gets a group created while the level is OFF (not wrapped), and the default group, created
    under DETAIL, stays checked. Rank 0's stray metric all-reduce on the default group then waits in
    the check's monitored barrier, which names the rank that never came."""
    with process_group(rank, world_size, timeout=SHORT):
        level = dist.get_debug_level()
        dist.set_debug_level(dist.DebugLevel.OFF)
        ddp_group = dist.new_group(timeout=SHORT)  # every rank creates it, while the level is OFF
        dist.set_debug_level(level)
        if rank == 0:
            print(f"debug level: {level.name}; the default group checked: {_checked(dist.group.WORLD)}, "
                  f"DDP's group checked: {_checked(ddp_group)}", flush=True)
        torch.manual_seed(0)
        ddp = DDP(nn.Linear(4, 1), process_group=ddp_group)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(steps):
            loss = ddp(torch.full((8, 4), float(rank + 1))).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step == 0 and rank == 0:
                dist.all_reduce(torch.tensor([1.0]))  # the stray metric, on the checked default group
        return [p.detach().flatten().tolist() for p in ddp.parameters()]


def mismatched_shapes(rank: int, world_size: int, fixed: bool = False, longer_on_rank0: bool = False) -> list[float]:
    """Each rank all-reduces a tensor of a different length (rank + 2 elements): rank 0 [1, 2],
    rank 1 [10, 20, 30], so that a sum shows which elements met. ``longer_on_rank0``: the lengths
    reversed (world_size + 1 - rank): rank 0 [1, 2, 3], rank 1 [10, 20]. ``fixed``: every rank 2 elements."""
    with process_group(rank, world_size, timeout=SHORT):
        numel = world_size + 1 - rank if longer_on_rank0 else rank + 2
        numel = 2 if fixed else numel  # the fix: the same shape on every rank
        t = torch.arange(1.0, numel + 1) * 10**rank
        dist.all_reduce(t)
        # A rank that "succeeds" returns nothing if another rank fails: say what it computed.
        print(f"rank {rank} finished its all_reduce with {t.tolist()}", flush=True)
        return t.tolist()


def gloo_calls_per_all_reduce(rank: int, world_size: int, calls: int = 4) -> dict[str, float]:
    """What gloo runs on this rank for each ``all_reduce`` the worker calls, counted by torch's
    profiler (gloo records each operation it runs as ``gloo:<operation>``)."""
    from torch.profiler import ProfilerActivity, profile

    with process_group(rank, world_size, timeout=SHORT):
        data = torch.ones(4)
        dist.all_reduce(data)  # a first call outside the count: only the steady state is counted
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                dist.all_reduce(data)
        counts = {e.key.removeprefix("gloo:"): e.count / calls
                  for e in prof.key_averages() if e.key.startswith("gloo:")}
        return dict(sorted(counts.items()))


def unused_parameter(rank: int, world_size: int, find_unused_parameters: bool = False) -> list[float]:
    """A model with a branch that forward never uses; two training steps under DDP."""

    with process_group(rank, world_size, timeout=SHORT):
        torch.manual_seed(0)
        model = _TwoHeads()
        ddp = DDP(model, find_unused_parameters=find_unused_parameters)
        losses = []
        for _ in range(2):
            loss = ddp(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            losses.append(round(loss.item(), 4))
        return losses


def unused_parameter_first_gradients(rank: int, world_size: int, find_unused_parameters: bool = False) -> list[float]:
    """One forward and backward of the model with an unused branch, on different data per rank: the
    used branch's weight gradient after this first ``backward()``. DDP averages it only if its bucket
    is all-reduced."""
    with process_group(rank, world_size, timeout=SHORT):
        torch.manual_seed(0)  # the same model on every rank
        ddp = DDP(_TwoHeads(), find_unused_parameters=find_unused_parameters)
        torch.manual_seed(1 + rank)  # different data per rank, as with a DistributedSampler
        ddp(torch.randn(8, 4)).pow(2).mean().backward()
        return [round(g, 6) for g in ddp.module.used.weight.grad.flatten().tolist()]


def slow_rank0_then_barrier(rank: int, world_size: int, timeout_s: float, save_s: float = 2.0) -> str:
    """A healthy job: rank 0 "saves a checkpoint" for ``save_s``, then every rank meets at a barrier.
    With a group timeout shorter than the save, the waiting ranks fail."""
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        if rank == 0:
            time.sleep(save_s)  # the save: slow, but nothing is wrong
        dist.barrier()
        return "passed"


def device_ids_on_cpu(rank: int, world_size: int) -> str:
    """DDP(model, device_ids=[rank]) with the model on the CPU."""
    with process_group(rank, world_size):
        DDP(nn.Linear(2, 2), device_ids=[rank])
        return "constructed"


def sampler_orders(rank: int, world_size: int, call_set_epoch: bool, epochs: int = 3) -> list[list[int]]:
    """The sample indices this rank sees in each epoch, from a shuffling DistributedSampler."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(8), num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    orders = []
    for epoch in range(epochs):
        if call_set_epoch:
            sampler.set_epoch(epoch)  # reshuffles: the permutation is seeded with seed + epoch
        orders.append(list(sampler))
    return orders


# ---- helpers


def _checked(group: dist.ProcessGroup) -> bool:
    """Whether DETAIL's collective check wraps this group's CPU backend."""
    return "Wrapper" in type(group._get_backend(torch.device("cpu"))).__name__


class _TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 1)
        self.unused = nn.Linear(4, 1)  # never called in forward: it gets no gradient

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def listening_addresses(port: int) -> list[str]:
    """The local addresses a socket listens on at ``port``, as ``ss -ltn`` lists them (Linux:
    read from /proc/net; "*" is every interface of this machine)."""
    found, tables_read = [], 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        tables_read += 1
        for row in rows:
            address, hex_port = row[1].split(":")
            if int(hex_port, 16) == port and row[3] == "0A":  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if sys.byteorder == "little":  # the kernel prints each 32-bit word in the machine's order
                    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = ipaddress.ip_address(raw)
                found.append("*" if ip.is_unspecified else str(ip))
    return sorted(set(found)) if tables_read else ["unknown: no /proc/net on this system"]
