"""Lesson 04 on how gradients travel: DDP written from scratch, three ways, checked against
torch's DDP; how many all-reduces bucket_cap_mb gives; a timeline of backward against communication;
what overlap saves when a comm hook makes communication slow (SlowWire, overlap_on_slow_wire).

The scratch versions are small classes with the same shape:

    model = BucketedOverlapDDP(module, bucket_cap_mb=0.25)  # or AllReduceAfterBackward(module), ...
    loss_fn(model(x), y).backward()
    model.finish_gradient_sync()  # now every rank holds the same averaged .grad
    optimizer.step()

All three broadcast rank 0's parameters when constructed and average gradients as torch's
allreduce_hook (ddp_comm_hooks/default_hooks.py) does: divide by world_size, then sum
all-reduce. (DDP's built-in path, with no hook, multiplies by 1/world_size instead.) They differ only in *when* the
all-reduces start and *how many* there are:

- AllReduceAfterBackward: after backward, one blocking all-reduce per parameter.
- PerParameterHooksDDP: an asynchronous all-reduce per parameter, started by a hook the moment
  that parameter's gradient is ready, so communication overlaps the rest of backward.
- BucketedOverlapDDP: gradients grouped into buckets of at most bucket_cap_mb; one asynchronous
  all-reduce per bucket, started when its last gradient is ready (as torch's DDP starts its own).

``allreduce_calls`` counts the all-reduces started, so the ways can be compared. Like torch's
DDP without find_unused_parameters, the hook-based ways expect every parameter to get a gradient.
``make(way, module, **options)`` builds any of them, or torch's DDP, by name.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, process_group, wrap_ddp
    from ddp_lib.workers.shared import LR, flat_grads, flat_params, gather_flat, make_mlp, rank_batch
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import device_ids_for, process_group, wrap_ddp
    from shared import LR, flat_grads, flat_params, gather_flat, make_mlp, rank_batch


class ScratchDDP(nn.Module):
    """What the three ways share: the wrapped module, the group, and the broadcast at construction."""

    def __init__(self, module: nn.Module, process_group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.module = module
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.allreduce_calls = 0
        with torch.no_grad():
            # Replicas must start equal, or averaging gradients keeps them different forever.
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, group=process_group, group_src=0)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _allreduce(self, tensor: torch.Tensor, async_op: bool):
        self.allreduce_calls += 1
        tensor.div_(self.world_size)  # sum of grad / world_size is the mean
        return dist.all_reduce(tensor, group=self.process_group, async_op=async_op)

    def finish_gradient_sync(self) -> None:
        """Call after backward, before optimizer.step(): returns when every .grad is averaged."""
        raise NotImplementedError


class AllReduceAfterBackward(ScratchDDP):
    """The simplest DDP: wait for backward to finish, then all-reduce each gradient in turn."""

    def finish_gradient_sync(self) -> None:
        for p in self.params:
            self._allreduce(p.grad, async_op=False)


class PerParameterHooksDDP(ScratchDDP):
    """One asynchronous all-reduce per parameter, started by a hook as its gradient is ready."""

    def __init__(self, module: nn.Module, process_group: dist.ProcessGroup | None = None) -> None:
        super().__init__(module, process_group)
        self._pending: list = []
        for p in self.params:
            # Runs after the gradient is fully accumulated into p.grad, during backward.
            p.register_post_accumulate_grad_hook(self._on_grad_ready)

    def _on_grad_ready(self, p: torch.Tensor) -> None:
        self._pending.append(self._allreduce(p.grad, async_op=True))

    def finish_gradient_sync(self) -> None:
        for work in self._pending:
            work.wait()
        self._pending.clear()


class BucketedOverlapDDP(ScratchDDP):
    """Gradients packed into buckets of at most ``bucket_cap_mb`` (a gradient larger than the cap gets
    a bucket of its own; torch's DDP instead closes a bucket once it has reached the cap, size >= cap); one
    asynchronous all-reduce per bucket, started when the bucket is full, in bucket order on every rank."""

    def __init__(self, module: nn.Module, process_group: dist.ProcessGroup | None = None,
                 bucket_cap_mb: float = 25.0) -> None:
        super().__init__(module, process_group)
        cap = bucket_cap_mb * 2**20
        # Backward produces the last layer's gradients first, so buckets fill in reverse order.
        self.buckets: list[list[torch.Tensor]] = [[]]
        size = 0
        for p in reversed(self.params):
            nbytes = p.numel() * p.element_size()
            if self.buckets[-1] and size + nbytes > cap:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
        self._bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self._reset()
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad_ready)

    def _reset(self) -> None:
        self._ready = [0] * len(self.buckets)
        self._next = 0  # the next bucket to launch: every rank must launch them in the same order
        self._pending: list[tuple[int, torch.Tensor, object]] = []

    def _on_grad_ready(self, p: torch.Tensor) -> None:
        self._ready[self._bucket_of[id(p)]] += 1
        while self._next < len(self.buckets) and self._ready[self._next] == len(self.buckets[self._next]):
            bucket = self.buckets[self._next]
            flat = torch.cat([q.grad.reshape(-1) for q in bucket])  # one message instead of many
            self._pending.append((self._next, flat, self._allreduce(flat, async_op=True)))
            self._next += 1

    def finish_gradient_sync(self) -> None:
        for i, flat, work in self._pending:
            work.wait()
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self._reset()


class TorchDDP(DDP):
    """torch's DDP with the same shape. On gloo (CPU) its all-reduces are done when backward returns;
    on a GPU backward only queues them on the stream, which the next use of .grad waits for."""

    def finish_gradient_sync(self) -> None:
        pass


Way = Literal["after_backward", "per_parameter_hooks", "buckets", "torch"]


WAYS: dict[str, type[nn.Module]] = {  # the keys are Way's values
    "after_backward": AllReduceAfterBackward,
    "per_parameter_hooks": PerParameterHooksDDP,
    "buckets": BucketedOverlapDDP,
    "torch": TorchDDP,
}


WIDE = (64, 128, 128, 128, 128, 8)  # weights of 32, 64, 64, 64 and 4 KiB


TIMELINE_WIDTHS = (256,) * 8  # seven 256 KiB weights: backward and all-reduces take visible time


def scratch_vs_torch(rank: int, world_size: int, way: Way = "buckets", steps: int = 4,
                     bucket_cap_mb: float = 0.001, seed: int = 0, per_rank_batch: int = 4) -> dict:
    """Train the same model with torch's DDP and with the from-scratch DDP ``way`` (one of WAYS) side
    by side for ``steps`` steps. Returns the largest difference of gradients and of parameters over all steps, the
    all-reduces per step of the scratch version, and whether all ranks ended equal.

    Args:
        way: the scratch DDP to compare with torch's.
        steps: SGD steps.
        bucket_cap_mb: bucket size in MiB.
        seed: seed of the model and data.
        per_rank_batch: batch per rank.
    """
    with process_group(rank, world_size) as device:
        # Different starting weights per rank: both must broadcast rank 0's.
        reference = wrap_ddp(make_mlp(seed + rank).to(device), device, bucket_cap_mb=bucket_cap_mb)
        options = {"bucket_cap_mb": bucket_cap_mb} if way in ("buckets", "torch") else {}
        if way == "torch":
            options["device_ids"] = device_ids_for(device)
        ours = make(way, make_mlp(seed + rank).to(device), **options)
        optimizers = [torch.optim.SGD(m.parameters(), lr=LR) for m in (reference, ours)]
        grad_diff = param_diff = 0.0
        calls = []
        for step in range(steps):
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, per_rank_batch, seed))
            before = getattr(ours, "allreduce_calls", 0)  # the hook-based ways start them during backward
            for model, optimizer in zip((reference, ours), optimizers):
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
            ours.finish_gradient_sync()
            calls.append(getattr(ours, "allreduce_calls", 0) - before)
            grad_diff = max(grad_diff, (flat_grads(reference) - flat_grads(ours)).abs().max().item())
            for optimizer in optimizers:
                optimizer.step()
            param_diff = max(param_diff, (flat_params(reference) - flat_params(ours)).abs().max().item())
        everyone = gather_flat(flat_params(ours).to(device))
        return {"way": way, "max_grad_diff": grad_diff, "max_param_diff": param_diff,
                "allreduces_per_step": calls, "ranks_equal": all(torch.equal(everyone[0], p) for p in everyone)}


BucketModel = Literal["wide", "four_mib"]


BUCKET_MODELS: dict[str, tuple[int, ...]] = {  # the keys are BucketModel's values
    "wide": WIDE,
    "four_mib": (512,) * 5,  # four Linear(512, 512): 1 MiB of weight and 2 KiB of bias each
}


def count_allreduces(rank: int, world_size: int, bucket_cap_mb: float | None = 25.0, steps: int = 3,
                     model: BucketModel = "wide", find_unused_parameters: bool = False) -> dict:
    """Train a model under DDP with ``bucket_cap_mb``; return the all-reduces of each step, the
    bucket sizes in bytes of the last step by bucket index, and of each step the sizes and the
    parameter names of the buckets in the order sent.

    Args:
        bucket_cap_mb: bucket size in MiB (None: leave DDP's default, 25 MiB with a 1 MiB first bucket).
        steps: training steps.
        model: "wide" (weights of 32, 64, 64, 64 and 4 KiB) or "four_mib" (four 1 MiB weights).
        find_unused_parameters: DDP's option of that name.
    """
    widths = BUCKET_MODELS[model]
    options = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    with process_group(rank, world_size) as device:
        ddp = wrap_ddp(make_mlp(0, widths).to(device), device, find_unused_parameters=find_unused_parameters,
                       **options)
        events: list[tuple] = []
        recording = _recording_hook(events, time.perf_counter)
        names = {param: name for name, param in ddp.module.named_parameters()}
        members: list[list[str]] = []  # each bucket's parameters, in the order DDP hands the buckets over

        def hook(state, bucket):
            members.append(sorted((names[p] for p in bucket.parameters()), key=list(names.values()).index))
            return recording(state, bucket)

        ddp.register_comm_hook(None, hook)
        per_step, sent, sent_names = [], [], []
        for step in range(steps):
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, 8, widths=widths))
            before = len(events)
            nn.functional.mse_loss(ddp(x), y).backward()
            per_step.append(len(events) - before)
            sent.append([nbytes for _, nbytes, start, _ in sorted(events[before:], key=lambda ev: ev[2])])
            sent_names.append(members[before:])
        last = sorted(events[-per_step[-1]:])
        return {"allreduces_per_step": per_step, "bucket_bytes": [nbytes for _, nbytes, _, _ in last],
                "bytes_in_order_sent": sent, "parameters_in_order_sent": sent_names}


TimelineWay = Literal["torch", "after_backward", "buckets"]


def backward_timeline(rank: int, world_size: int, bucket_cap_mb: float = 0.3, warmup: int = 2,
                      per_rank_batch: int = 256, way: TimelineWay = "torch", repeats: int = 1) -> dict:
    """Record one backward under DDP: when each weight's gradient was ready, when each all-reduce
    started and ended, when backward returned and when the gradients were averaged, in ms from the
    start of backward, which follows a barrier (each rank's clock, started together).

    Args:
        bucket_cap_mb: bucket size in MiB (torch and buckets).
        warmup: backward passes before the one recorded.
        per_rank_batch: batch per rank.
        way: "torch" (torch's DDP), or the scratch "after_backward" or "buckets".
        repeats: backward passes timed after the warm-up; the last one is recorded in full, and
            "synced_ms_each" holds each one's time until every gradient was averaged.
    """
    with process_group(rank, world_size) as device:
        clock = time.perf_counter
        events: list[tuple] = []
        ready: list[tuple[str, float]] = []
        module = make_mlp(0, TIMELINE_WIDTHS).to(device)
        _record_grad_ready(module, ready, clock)  # before any DDP's own hooks, so these fire first
        if way == "torch":
            model = wrap_ddp(module, device, bucket_cap_mb=bucket_cap_mb)
            model.register_comm_hook(None, _recording_hook(events, clock))
            finish = None
        else:
            model = make(way, module, **({"bucket_cap_mb": bucket_cap_mb} if way == "buckets" else {}))
            _recording_scratch_allreduce(model, events, clock)
            finish = model.finish_gradient_sync
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=TIMELINE_WIDTHS))
        synced_each = []
        for i in range(warmup + repeats):  # the last iteration is the one recorded
            events.clear()
            ready.clear()
            loss = nn.functional.mse_loss(model(x), y)
            dist.barrier()  # the ranks start backward together, so their clocks can be compared
            start = clock()
            loss.backward()
            end = clock()
            if finish is not None:
                finish()
            synced = clock()
            if i >= warmup:
                synced_each.append(round(1000 * (synced - start), 3))
        recorded = _pass_record(start, end, synced, events, ready, renumber=finish is not None)
        return {**recorded, "synced_ms_each": synced_each}


def _record_grad_ready(module: nn.Module, ready: list[tuple[str, float]], clock) -> None:
    """Append (name, time) to ``ready`` as each weight's gradient is accumulated."""
    for name, p in module.named_parameters():
        if name.endswith("weight"):
            p.register_post_accumulate_grad_hook(lambda _p, name=name: ready.append((name, clock())))


def _pass_record(start: float, end: float, synced: float, events: list[tuple],
                 ready: list[tuple[str, float]], renumber: bool) -> dict:
    """One backward pass as backward_timeline returns it, in ms since ``start``; ``renumber``
    numbers a scratch DDP's all-reduces of this pass from 0."""
    def ms(t: float) -> float:
        return round(1000 * (t - start), 3)
    events = sorted(events, key=lambda ev: ev[2])
    if renumber:
        events = [(i, *ev[1:]) for i, ev in enumerate(events)]
    return {
        "backward_ms": ms(end),
        "synced_ms": ms(synced),
        "grad_ready": [(name, ms(t)) for name, t in ready],
        "allreduces": [{"bucket": i, "bytes": nbytes, "start": ms(s), "end": ms(e)}
                       for i, nbytes, s, e in events],
    }


def scratch_sync_times(rank: int, world_size: int, bucket_cap_mb: float = 0.6, warmup: int = 2,
                       repeats: int = 15, per_rank_batch: int = 256) -> dict:
    """Time the scratch "after_backward" and "buckets" ways in one job, the two in turn, so that a
    change of load on the machine falls on both alike. Each pass runs backward and
    finish_gradient_sync after a barrier. Returns, per way, the ms of each timed pass until every
    gradient was averaged ("synced_ms_each"), and the pass whose time is the median
    (``sorted(times)[len(times) // 2]``), recorded as backward_timeline records one ("median_pass").

    Args:
        bucket_cap_mb: bucket size in MiB (buckets).
        warmup: passes of each way before the timed ones.
        repeats: timed passes of each way.
        per_rank_batch: batch per rank.
    """
    clock = time.perf_counter
    with process_group(rank, world_size) as device:
        models, records = {}, {}
        for way in ("after_backward", "buckets"):
            module = make_mlp(0, TIMELINE_WIDTHS).to(device)
            events: list[tuple] = []
            ready: list[tuple[str, float]] = []
            _record_grad_ready(module, ready, clock)
            models[way] = make(way, module, **({"bucket_cap_mb": bucket_cap_mb} if way == "buckets" else {}))
            _recording_scratch_allreduce(models[way], events, clock)
            records[way] = (events, ready)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=TIMELINE_WIDTHS))
        passes: dict[str, list[dict]] = {way: [] for way in models}
        for i in range(warmup + repeats):
            for way, model in models.items():  # the two ways in turn
                events, ready = records[way]
                events.clear()
                ready.clear()
                model.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                dist.barrier()
                start = clock()
                loss.backward()
                end = clock()
                model.finish_gradient_sync()
                synced = clock()
                if i >= warmup:
                    passes[way].append(_pass_record(start, end, synced, events, ready, renumber=True))
        times = {way: [p["synced_ms"] for p in each] for way, each in passes.items()}
        median = {way: sorted(each, key=lambda p: p["synced_ms"])[len(each) // 2] for way, each in passes.items()}
        return {"synced_ms_each": times, "median_pass": median}


BUCKET_VIEW_SETTINGS = (("copy", False, True), ("view", True, True), ("view", True, False))


def grads_in_buckets(rank: int, world_size: int, steps: int = 3) -> dict:
    """Train the wide model ``steps`` SGD steps under DDP (0.05 MiB buckets) three ways: the default
    copy; ``gradient_as_bucket_view=True`` with ``optimizer.zero_grad()`` (set_to_none=True, its
    default); and with ``zero_grad(set_to_none=False)``. For each, return how many separate memory
    blocks hold the ``.grad`` tensors after the last backward (one per parameter, or one per bucket),
    the buckets, and the operators the reducer ran in that backward: ``aten::mul`` copies a gradient
    into its bucket scaled by 1/world_size, ``aten::div_`` divides it in place inside the bucket, and
    ``copy_bucket_to_grad`` (the reducer's own profiler label) copies the mean back out into ``.grad``.
    Also the error of ``detach_()`` on a ``.grad`` that is a view into a bucket. No communication hook:
    with one, the reducer copies without scaling and leaves the division to the hook."""
    result = {}
    with process_group(rank, world_size) as device:
        for name, as_view, set_to_none in BUCKET_VIEW_SETTINGS:
            ddp = wrap_ddp(make_mlp(0, WIDE).to(device), device, bucket_cap_mb=0.05,
                           gradient_as_bucket_view=as_view)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
            for step in range(steps):  # the .grad become views after the first step (DDP's docstring)
                optimizer.zero_grad(set_to_none=set_to_none)
                x, y = (t.to(device) for t in rank_batch(step, rank, world_size, 8, widths=WIDE))
                loss = nn.functional.mse_loss(ddp(x), y)
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    loss.backward()
                optimizer.step()
            ops = {e.key: e.count for e in prof.key_averages()}
            blocks = {p.grad.untyped_storage().data_ptr() for p in ddp.parameters()}
            result[f"{name}, set_to_none={set_to_none}"] = {
                "parameters": len(list(ddp.parameters())), "memory_blocks": len(blocks),
                "buckets": ops.get("c10d::allreduce_", 0), "copies_into_bucket": ops.get("aten::mul", 0),
                "divisions_in_place": ops.get("aten::div_", 0),
                "copies_back": ops.get("torch.distributed.ddp.reducer::copy_bucket_to_grad", 0)}
        try:
            next(ddp.parameters()).grad.detach_()
            result["detach_ error"] = "no error"
        except RuntimeError as e:
            result["detach_ error"] = ". ".join(str(e).split(". ")[:2]) + "."  # the rest names DDP
    return result


def gradient_bytes(rank: int, world_size: int, steps: int = 3) -> dict:
    """Bytes of memory that hold gradients after the last of ``steps`` SGD steps, for each of
    ``BUCKET_VIEW_SETTINGS``: the distinct storages of every bucket (recorded by a communication hook
    that then averages as DDP's default does) and of every ``.grad``, counted once each. Also the
    parameters' bytes, the size of one full set of gradients."""
    result = {}
    with process_group(rank, world_size) as device:
        for name, as_view, set_to_none in BUCKET_VIEW_SETTINGS:
            ddp = wrap_ddp(make_mlp(0, WIDE).to(device), device, bucket_cap_mb=0.05,
                           gradient_as_bucket_view=as_view)
            storages: dict[int, int] = {}  # data pointer -> bytes, of the last backward's buckets

            def hook(state, bucket, storages=storages):
                buffer = bucket.buffer().untyped_storage()
                storages[buffer.data_ptr()] = buffer.nbytes()
                return default_hooks.allreduce_hook(state, bucket)

            ddp.register_comm_hook(None, hook)
            optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
            for step in range(steps):
                optimizer.zero_grad(set_to_none=set_to_none)
                storages.clear()
                x, y = (t.to(device) for t in rank_batch(step, rank, world_size, 8, widths=WIDE))
                nn.functional.mse_loss(ddp(x), y).backward()
                optimizer.step()
            bucket_bytes = sum(storages.values())
            for p in ddp.parameters():
                storages[p.grad.untyped_storage().data_ptr()] = p.grad.untyped_storage().nbytes()
            result[f"{name}, set_to_none={set_to_none}"] = {
                "parameter_bytes": sum(p.numel() * p.element_size() for p in ddp.parameters()),
                "bucket_bytes": bucket_bytes, "gradient_bytes": sum(storages.values())}
    return result


WireWay = Literal["overlap", "after_backward"]


def overlap_on_slow_wire(rank: int, world_size: int, delay_ms: float = 10.0, repeats: int = 8,
                         bucket_cap_mb: float = 0.3, per_rank_batch: int = 256, warmup: int = 2) -> dict:
    """Time backward under DDP with every bucket sent over a SlowWire, the two ways in turn
    (``repeats`` times each, in turn), after a barrier so the ranks start together.
    Also time backward alone, under ``no_sync()``. Returns the times in ms of each pass, the
    number of buckets, and the delay.

    Args:
        delay_ms: the wire's extra time per bucket.
        repeats: timed passes of each way.
        bucket_cap_mb: bucket size in MiB (0.3: two weights per bucket).
        per_rank_batch: batch per rank.
        warmup: passes of each way before the timed ones (the buckets are rebuilt after the first).
    """
    with process_group(rank, world_size) as device:
        model = wrap_ddp(make_mlp(0, TIMELINE_WIDTHS).to(device), device, bucket_cap_mb=bucket_cap_mb)
        wire = SlowWire(delay_ms)
        model.register_comm_hook(None, wire.hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=TIMELINE_WIDTHS))

        def one_pass(way: WireWay | Literal["no_sync"]) -> float:
            wire.hold_until_last = way == "after_backward"
            wire.buckets_sent = 0
            model.zero_grad()
            if way == "no_sync":
                with model.no_sync():
                    loss = nn.functional.mse_loss(model(x), y)
                    dist.barrier()
                    start = time.perf_counter()
                    loss.backward()
            else:
                loss = nn.functional.mse_loss(model(x), y)
                dist.barrier()
                start = time.perf_counter()
                loss.backward()  # returns once DDP has waited for every bucket's future
            return round(1000 * (time.perf_counter() - start), 3)

        try:
            times: dict[str, list[float]] = {"no_sync": [], "overlap": [], "after_backward": []}
            for i in range(warmup + repeats):
                for way in times:
                    t = one_pass(way)
                    if i >= warmup:
                        times[way].append(t)
            buckets = wire.buckets_sent  # in the last pass, whose way sends every bucket
        finally:
            wire.close()
        return {"ms": times, "buckets": buckets, "delay_ms": delay_ms}


def slow_wire_report(r: dict, tolerance_ms: float = 10.0) -> list[str]:
    """The lines that sum up one :func:`overlap_on_slow_wire` result ``r``: each way's median pass,
    the wire's own time, the verdict on which way returned first, whether overlap's lead stays
    within the no-communication time (give or take ``tolerance_ms``, about one way's spread), and in
    how many rounds overlap returned before the same round's after-backward pass."""
    median = {way: sorted(times)[len(times) // 2] for way, times in r["ms"].items()}
    labels = {"no_sync": "no communication", "overlap": "overlap", "after_backward": "after backward"}
    lines = [f"{labels[way]:<17} backward returned after {median[way]:6.1f} ms "
             f"(median of {len(times)}; from {min(times):.0f} to {max(times):.0f})"
             for way, times in r["ms"].items()]
    lines.append(f"the wire alone: {r['buckets']} buckets x {r['delay_ms']:g} ms = {r['buckets'] * r['delay_ms']:g} ms")
    overlap, after = r["ms"]["overlap"], r["ms"]["after_backward"]
    margin = median["after_backward"] - median["overlap"]
    # a way wins only if its median pass beats the other way's fastest pass
    verdict = (f"overlap returned first, {margin:.0f} ms earlier" if median["overlap"] < min(after)
               else "after backward returned first" if median["after_backward"] < min(overlap)
               else f"within noise: overlap's median ({median['overlap']:.0f} ms) was not below "
                    f"the fastest after-backward pass ({min(after):.0f} ms)")
    lines += ["rule: a way wins only if its median pass beats the other way's fastest pass",
              f"verdict on this machine, now: {verdict}",
              f"overlap's lead, {margin:.0f} ms, at most the no-communication time, {median['no_sync']:.0f} ms "
              f"(give or take {tolerance_ms:g} ms): {margin <= median['no_sync'] + tolerance_ms}"]
    # Each round times the ways one after the other, so a pair shares the machine's load of the moment.
    wins = sum(o < a for o, a in zip(overlap, after))
    lines.append(f"round by round: overlap returned first in {wins} of {len(overlap)} rounds")
    return lines


def slow_wire_gradients_match_default(rank: int, world_size: int, hold_until_last: bool = False,
                                      delay_ms: float = 1.0, per_rank_batch: int = 8) -> float:
    """One backward through two DDP copies of one model on this rank's data: one with SlowWire's hook,
    one with DDP's default all-reduce. Returns the largest difference of their gradients."""
    with process_group(rank, world_size) as device:
        models = [wrap_ddp(make_mlp(0, TIMELINE_WIDTHS).to(device), device, bucket_cap_mb=0.3) for _ in range(2)]
        wire = SlowWire(delay_ms, hold_until_last)
        models[0].register_comm_hook(None, wire.hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=TIMELINE_WIDTHS))
        try:
            for model in models:
                nn.functional.mse_loss(model(x), y).backward()
        finally:
            wire.close()
        return max((a.grad - b.grad).abs().max().item()
                   for a, b in zip(models[0].parameters(), models[1].parameters()))


# ---- helpers


def make(way: str, module: nn.Module, **options) -> nn.Module:
    """Wrap ``module`` in one of WAYS by name; options (e.g. bucket_cap_mb) go to its constructor."""
    if way not in WAYS:
        raise ValueError(f"unknown way {way!r}; accepted: {', '.join(WAYS)}")
    return WAYS[way](module, **options)


def _recording_hook(events: list[tuple], clock):
    """The default all-reduce comm hook, recording (bucket index, bytes, start, end) per call."""
    def hook(state, bucket):
        start = clock()
        nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
        future = default_hooks.allreduce_hook(state, bucket)

        def done(fut):
            events.append((bucket.index(), nbytes, start, clock()))
            return fut.value()
        return future.then(done)
    return hook


def _recording_scratch_allreduce(model: ScratchDDP, events: list[tuple], clock) -> None:
    """Make a scratch DDP record (call index, bytes, start, end) for each of its all-reduces."""
    real = model._allreduce
    calls = [0]

    def recorded(tensor: torch.Tensor, async_op: bool):
        index, start, nbytes = calls[0], clock(), tensor.numel() * tensor.element_size()
        calls[0] += 1
        work = real(tensor, async_op)
        if work is None:  # a blocking call: done when it returns
            events.append((index, nbytes, start, clock()))
        else:
            work.get_future().then(lambda _fut: events.append((index, nbytes, start, clock())))
        return work
    model._allreduce = recorded


class SlowWire:
    """A DDP communication hook that sends each bucket over a slow wire: one thread that waits
    ``delay_ms``, then all-reduces the bucket's mean. ``hold_until_last`` holds the buckets until
    the last one of the backward pass arrives."""

    def __init__(self, delay_ms: float, hold_until_last: bool = False) -> None:
        self.delay_s = delay_ms / 1000
        self.hold_until_last = hold_until_last
        self._wire = ThreadPoolExecutor(max_workers=1)  # one thread: buckets leave one after another
        self._held: list[tuple[torch.Tensor, torch.futures.Future]] = []
        self.buckets_sent = 0

    def hook(self, state, bucket):  # no annotations: DDP rejects string ones (this module's __future__ import)
        """Called by DDP once per bucket, bucket 0 first; returns a future of the averaged bucket."""
        done: torch.futures.Future = torch.futures.Future()
        self.buckets_sent += 1
        self._held.append((bucket.buffer(), done))
        if not self.hold_until_last or bucket.is_last():
            for buffer, future in self._held:  # in bucket order, the same on every rank
                self._wire.submit(self._send, buffer, future)
            self._held.clear()
        return done  # DDP waits for it at the end of backward, then copies the mean into .grad

    def _send(self, buffer: torch.Tensor, done: torch.futures.Future) -> None:
        try:
            time.sleep(self.delay_s)
            buffer.div_(dist.get_world_size())
            dist.all_reduce(buffer)
            done.set_result(buffer)
        except Exception as e:  # noqa: BLE001 - a failure must reach DDP, or backward waits forever
            done.set_exception(e)

    def close(self) -> None:
        self._wire.shutdown()
