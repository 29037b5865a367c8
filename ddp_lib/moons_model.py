"""The small classifier the training lessons use, with an optional batch-norm layer, and a
batch norm that synchronises its statistics across ranks on any device (torch's own
``nn.SyncBatchNorm`` accepts only GPU tensors)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn

NORMS = ("none", "batch", "sync")


class AllReduceBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch (all ranks together),
    the same computation as ``nn.SyncBatchNorm``, written with a differentiable all-reduce."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        channels = x.shape[1]
        count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        # Sum, sum of squares and count from every rank in one all-reduce; its backward is an
        # all-reduce too, so each rank's gradient includes how its samples moved the statistics.
        stats = dist_fn.all_reduce(torch.cat([x.sum(0), (x * x).sum(0), count]))
        total = stats[-1]
        mean = stats[:channels] / total
        var = stats[channels:2 * channels] / total - mean * mean
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * total / (total - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class MoonsNet(nn.Module):
    """Linear(2, hidden) -> [norm] -> ReLU -> Linear(hidden, 2). ``norm`` is "none", "batch"
    (BatchNorm1d, statistics of this rank's batch) or "sync" (statistics of the global batch)."""

    def __init__(self, hidden: int = 32, norm: str = "none") -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.fc1 = nn.Linear(2, hidden)
        self.norm = {"none": nn.Identity(), "batch": nn.BatchNorm1d(hidden),
                     "sync": AllReduceBatchNorm1d(hidden)}[norm]
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.norm(self.fc1(x))))


def to_torch_sync_batchnorm(model: nn.Module) -> nn.Module:
    """On a GPU, swap every batch norm (ours included) for torch's ``nn.SyncBatchNorm``."""
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)
