"""Lesson 04: what overlapping backward with communication saves, where communication is slow.

On a laptop's CPU, gloo's all-reduces of small buckets take little time, and they compete with
autograd for the same cores, so overlap shows little. Here every bucket's message also spends a fixed
time on a slow "wire": one thread per rank that sends the buckets one after another, and sleeps
``delay_ms`` before each all-reduce, as a slow network would. Sleeping uses no CPU, so the wire does
not slow backward down. The same communication hook sends the buckets two ways:

- "overlap": a bucket goes on the wire the moment DDP hands it over, while backward still runs
  (what DDP does);
- "after_backward": the hook holds every bucket until DDP hands over the last one, at the end of
  backward, and only then puts them all on the wire.

Same buckets, same delays, same all-reduces: only the moment the wire starts differs.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group, wrap_ddp
    from ddp_lib.workers.shared import make_mlp, rank_batch
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group, wrap_ddp
    from shared import make_mlp, rank_batch

WireWay = Literal["overlap", "after_backward"]
WIDTHS = (256,) * 8  # seven 256 KiB weights: backward takes tens of ms on a CPU


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
        model = wrap_ddp(make_mlp(0, WIDTHS).to(device), device, bucket_cap_mb=bucket_cap_mb)
        wire = SlowWire(delay_ms)
        model.register_comm_hook(None, wire.hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=WIDTHS))

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


def slow_wire_gradients_match_default(rank: int, world_size: int, hold_until_last: bool = False,
                                      delay_ms: float = 1.0, per_rank_batch: int = 8) -> float:
    """One backward through two DDP copies of one model on this rank's data: one with SlowWire's hook,
    one with DDP's default all-reduce. Returns the largest difference of their gradients."""
    with process_group(rank, world_size) as device:
        models = [wrap_ddp(make_mlp(0, WIDTHS).to(device), device, bucket_cap_mb=0.3) for _ in range(2)]
        wire = SlowWire(delay_ms, hold_until_last)
        models[0].register_comm_hook(None, wire.hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=WIDTHS))
        try:
            for model in models:
                nn.functional.mse_loss(model(x), y).backward()
        finally:
            wire.close()
        return max((a.grad - b.grad).abs().max().item()
                   for a, b in zip(models[0].parameters(), models[1].parameters()))
