"""What the benchmarks run on every rank (lesson 08). Each times its sides interleaved
(one repeat of each in turn), takes the slowest rank's time per repeat, and returns medians."""

from __future__ import annotations

import os
import random
import time
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.bench.stats import median, quartiles
from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers import buckets
from ddp_lib.workers.ring import ring_all_reduce
from ddp_lib.workers.shared import make_mlp

# Five weights of 0.5 to 1 MiB (3.6 MiB of gradients): big enough that communication shows.
DDP_WIDTHS = (256, 512, 512, 512, 512, 10)
DDP_BATCH = 64


def _slowest(times: list[float]) -> list[float]:
    """Per repeat, the slowest rank's time: a collective is only done when every rank is done."""
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def loops_per_timing(nbytes: int) -> int:
    """How many all-reduces ``allreduce_sweep`` times in one loop for a message of ``nbytes``."""
    return max(1, min(20, (4 << 20) // nbytes))


def size_order(n_sizes: int, repeat: int) -> list[int]:
    """The order in which ``allreduce_sweep`` visits its sizes in one repeat: every size once,
    shuffled with the repeat as seed, so every rank draws the same order and a moment of load
    lands on different sizes in different repeats. Repeat 0, the warm-up, goes in order."""
    order = list(range(n_sizes))
    if repeat:
        random.Random(repeat).shuffle(order)
    return order


def allreduce_sweep(rank: int, world_size: int, sizes: list[int], repeats: int = 5,
                    with_ring: bool = False) -> list[dict]:
    """For each message size in bytes, the median seconds of one float32 dist.all_reduce and,
    with_ring, of lesson 01's ring_all_reduce, timed alternately, each with its first and third
    quartiles over the repeats ("all_reduce_quartiles_s"). Each repeat visits every size, in the
    order ``size_order`` draws. Rank 0's list is the result."""
    with process_group(rank, world_size) as device:
        sides = {"all_reduce_s": lambda t: dist.all_reduce(t)}
        if with_ring:
            sides["ring_s"] = ring_all_reduce
        tensors = [torch.ones(max(1, nbytes // 4), device=device) for nbytes in sizes]
        # Small messages take microseconds: time a loop and divide, as nccl-tests does.
        iters = [loops_per_timing(nbytes) for nbytes in sizes]
        times: list[dict[str, list[float]]] = [{name: [] for name in sides} for _ in sizes]
        for repeat in range(repeats + 1):  # the first round is warm-up
            for i in size_order(len(sizes), repeat):
                # Rotate who goes first, so no side always follows the same neighbour.
                names = list(sides)[repeat % len(sides):] + list(sides)[:repeat % len(sides)]
                for name in names:
                    dist.barrier()
                    start = time.perf_counter()
                    for _ in range(iters[i]):
                        sides[name](tensors[i])
                    if repeat:
                        times[i][name].append((time.perf_counter() - start) / iters[i])
        rows = []
        for nbytes, per_side in zip(sizes, times):
            row = {"bytes": nbytes}
            for name, t in per_side.items():
                slowest = _slowest(t)
                row[name] = median(slowest)
                row[name.removesuffix("_s") + "_quartiles_s"] = quartiles(slowest)
            rows.append(row)
        return rows


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    if hasattr(model, "finish_gradient_sync"):
        model.finish_gradient_sync()
    optimizer.step()


def ddp_steps(rank: int, world_size: int, ways: list[str], repeats: int = 10,
              bucket_cap_mb: float = 25.0, seed: int = 0) -> dict:
    """Median seconds of one SGD step of the same MLP for each way: "local" (no wrapper), or a
    way of writing DDP ("after_backward", "per_parameter_hooks", "buckets", "torch"), taken in turn;
    "all_reduce" times one bare all-reduce of as many floats as the model has parameters.
    Returns {"step_s": {way: seconds}, "allreduces": {way: per step, scratch ways only}}, and, when
    both "local" and "torch" run, "extra_quartiles_s": the quartiles of torch minus local per round."""
    with process_group(rank, world_size) as device:
        models = {}
        for way in ways:
            if way == "all_reduce":  # the gradients' bytes in one bare all-reduce: DDP's communication alone
                continue
            module = make_mlp(seed, DDP_WIDTHS).to(device)
            if way == "local":
                models[way] = module
            else:
                options = {"bucket_cap_mb": bucket_cap_mb} if way in ("buckets", "torch") else {}
                models[way] = buckets.make(way, module, **options)
        optimizers = {way: torch.optim.SGD(m.parameters(), lr=0.01) for way, m in models.items()}
        g = torch.Generator().manual_seed(seed + rank)
        x = torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=g).to(device)
        y = torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=g).to(device)
        steps = {way: partial(train_step, model, optimizers[way], x, y) for way, model in models.items()}
        flat = torch.zeros(sum(p.numel() for p in make_mlp(seed, DDP_WIDTHS).parameters()), device=device)
        steps["all_reduce"] = partial(dist.all_reduce, flat)
        times: dict[str, list[float]] = {way: [] for way in ways}
        for repeat in range(repeats + 2):  # two warm-up rounds: torch's DDP rebuilds buckets after its first
            # Rotate who goes first, so no way always follows the same neighbour.
            order = ways[repeat % len(ways):] + ways[:repeat % len(ways)]
            for way in order:
                dist.barrier()
                start = time.perf_counter()
                steps[way]()
                if repeat >= 2:
                    times[way].append(time.perf_counter() - start)
        calls = {}
        for way, model in models.items():
            if hasattr(model, "allreduce_calls"):
                before = model.allreduce_calls
                train_step(model, optimizers[way], x, y)
                calls[way] = model.allreduce_calls - before
            elif way == "torch":  # torch's reducer runs in C++: count its bucket all-reduces on a
                # second, untimed copy with a counting comm hook (as bucket_sweep does)
                counter = [0]
                counted = buckets.make(way, make_mlp(seed, DDP_WIDTHS).to(device), bucket_cap_mb=bucket_cap_mb)
                counted.register_comm_hook(None, _counting_hook(counter))
                spare = torch.optim.SGD(counted.parameters(), lr=0.01)
                train_step(counted, spare, x, y)  # DDP rebuilds its buckets after the first step
                counter[0] = 0
                train_step(counted, spare, x, y)
                calls[way] = counter[0]
        rounds = {way: _slowest(t) for way, t in times.items()}
        result = {"step_s": {way: median(t) for way, t in rounds.items()}, "allreduces": calls}
        if "local" in rounds and "torch" in rounds:  # DDP's extra time, round by round: both shared its load
            result["extra_quartiles_s"] = quartiles([d - loc for d, loc in zip(rounds["torch"], rounds["local"])])
        return result


def _counting_hook(counter: list[int]):
    """torch's default all-reduce comm hook, counting its calls."""
    def hook(state, bucket):
        counter[0] += 1
        return default_hooks.allreduce_hook(state, bucket)
    return hook


def bucket_sweep(rank: int, world_size: int, caps_mb: list[float | None], repeats: int = 10,
                 seed: int = 0) -> list[dict]:
    """For each bucket_cap_mb (None: left out, DDP's default), the seconds of a torch DDP step in
    each round (the slowest rank's; the bucket sizes taken in turn, so a round's steps share the
    machine's load) and their median, and the all-reduces per step, counted by a hook on a second,
    untimed copy."""
    with process_group(rank, world_size) as device:
        timed, counted, counters = {}, {}, {}
        for cap in caps_mb:
            timed[cap] = wrap_ddp(make_mlp(seed, DDP_WIDTHS).to(device), device, bucket_cap_mb=cap)
            counted[cap] = wrap_ddp(make_mlp(seed, DDP_WIDTHS).to(device), device, bucket_cap_mb=cap)
            counters[cap] = [0]
            counted[cap].register_comm_hook(None, _counting_hook(counters[cap]))
        optimizers = {cap: torch.optim.SGD(m.parameters(), lr=0.01) for cap, m in timed.items()}
        g = torch.Generator().manual_seed(seed + rank)
        x = torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=g).to(device)
        y = torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=g).to(device)
        times: dict[float, list[float]] = {cap: [] for cap in caps_mb}
        for repeat in range(repeats + 2):
            order = caps_mb[repeat % len(caps_mb):] + caps_mb[:repeat % len(caps_mb)]
            for cap in order:
                dist.barrier()
                start = time.perf_counter()
                train_step(timed[cap], optimizers[cap], x, y)
                if repeat >= 2:
                    times[cap].append(time.perf_counter() - start)
        rows = []
        for cap in caps_mb:
            spare = torch.optim.SGD(counted[cap].parameters(), lr=0.01)
            first_sizes = bucket_sizes(counted[cap])
            train_step(counted[cap], spare, x, y)
            first_step = counters[cap][0]
            counters[cap][0] = 0
            train_step(counted[cap], spare, x, y)  # DDP rebuilt its buckets before this step's forward
            rounds_s = _slowest(times[cap])
            rows.append({"bucket_cap_mb": cap, "step_s": median(rounds_s), "rounds_s": rounds_s,
                         "allreduces": counters[cap][0],
                         "first_step_allreduces": first_step, "first_step_bucket_bytes": first_sizes,
                         "bucket_bytes": bucket_sizes(counted[cap])})
        return rows


def bucket_sizes(model: DDP) -> list[int]:
    """The bytes of each of DDP's buckets now, in the order DDP all-reduces them, read from its
    reducer (a private torch call)."""
    return [b.buffer().numel() * b.buffer().element_size() for b in model.reducer._get_zeros_like_grad_buckets()]


def timed_train(rank: int, world_size: int, epochs: int, batch_size: int = 16) -> float:
    """Seconds this rank spent in ddp_lib.workers.train.train (group, model, data and epochs),
    timed inside the process so launch noise stays out."""
    from ddp_lib.workers.train import train

    start = time.perf_counter()
    train(rank, world_size, epochs, batch_size, 0.1, 0)
    return time.perf_counter() - start


def allreduce_once(rank: int, world_size: int) -> float:
    """What ddp_lib's launcher starts in the launch and start-up benchmarks: join, all-reduce
    1024 floats, leave."""
    with process_group(rank, world_size):
        t = torch.ones(1024)
        dist.all_reduce(t)
        return t[0].item()


def plain_allreduce(i: int, world_size: int, port: int) -> None:
    """The same work under torch.multiprocessing (launch and start-up benchmarks): join on
    ``port`` (rank 0 hosts the store), all-reduce 1024 floats, leave."""
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)  # rank 0 must host the store itself
    with process_group(i, world_size, init_method=f"tcp://127.0.0.1:{port}"):
        dist.all_reduce(torch.ones(1024))
