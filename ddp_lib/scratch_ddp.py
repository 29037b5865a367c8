"""DDP written from scratch, three ways, each a small class with the same shape.

    model = BucketedOverlapDDP(module, bucket_cap_mb=0.25)  # or AllReduceAfterBackward(module), ...
    loss_fn(model(x), y).backward()
    model.finish_gradient_sync()  # now every rank holds the same averaged .grad
    optimizer.step()

All three broadcast rank 0's parameters when constructed and average gradients as torch's
default hook does: divide by world_size, then sum all-reduce. They differ only in *when* the
all-reduces start and *how many* there are:

- AllReduceAfterBackward: after backward, one blocking all-reduce per parameter.
- PerParameterHooksDDP: an asynchronous all-reduce per parameter, started by a hook the moment
  that parameter's gradient is ready, so communication overlaps the rest of backward.
- BucketedOverlapDDP: gradients grouped into buckets of about bucket_cap_mb; one asynchronous
  all-reduce per bucket, started when its last gradient is ready (what torch's DDP does).

``allreduce_calls`` counts the all-reduces started, so the ways can be compared. Like torch's
DDP without find_unused_parameters, the hook-based ways expect every parameter to get a gradient.
``make(way, module, **options)`` builds any of them, or torch's DDP, by name.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class _ScratchDDP(nn.Module):
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


class AllReduceAfterBackward(_ScratchDDP):
    """The simplest DDP: wait for backward to finish, then all-reduce each gradient in turn."""

    def finish_gradient_sync(self) -> None:
        for p in self.params:
            self._allreduce(p.grad, async_op=False)


class PerParameterHooksDDP(_ScratchDDP):
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


class BucketedOverlapDDP(_ScratchDDP):
    """Gradients packed into buckets of about ``bucket_cap_mb``; one asynchronous all-reduce per
    bucket, started when the bucket is full, in bucket order on every rank."""

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
    """torch's DDP with the same shape: its all-reduces are already done when backward returns."""

    def finish_gradient_sync(self) -> None:
        pass


WAYS = {
    "after_backward": AllReduceAfterBackward,
    "per_parameter_hooks": PerParameterHooksDDP,
    "buckets": BucketedOverlapDDP,
    "torch": TorchDDP,
}


def make(way: str, module: nn.Module, **options) -> nn.Module:
    """Wrap ``module`` in one of WAYS by name; options (e.g. bucket_cap_mb) go to its constructor."""
    if way not in WAYS:
        raise ValueError(f"unknown way {way!r}; accepted: {', '.join(WAYS)}")
    return WAYS[way](module, **options)
