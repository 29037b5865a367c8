"""What the workers of several lessons share: the classic example's model, lesson 04's MLP and its
batches, flat views of parameters and gradients, lesson 01's starting tensor and lesson 05's data.

A model or helper that one worker module uses lives in that module. This file imports only torch
and the standard library: a copied worker takes it along with ``process_group.py`` (the README's
copy table, written from ``ddp_lib/workers/copying.py``, names it where a worker needs it).
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset


class ToyModel(nn.Module):
    """The classic example's model: Linear(10, 10) -> ReLU -> Linear(10, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def param_checksum(model: nn.Module) -> float:
    """Sum of every parameter, rounded: equal on every rank when the replicas agree."""
    with torch.no_grad():
        total = sum(p.detach().double().sum().item() for p in model.parameters())
    return round(total, 6)


WIDTHS = (8, 16, 16, 4)  # in_features, hidden, hidden, out_features: 484 parameters
LR = 0.1


def make_mlp(seed: int, widths: tuple[int, ...] = WIDTHS) -> nn.Sequential:
    """Linear -> Tanh -> ... -> Linear with the given widths, initialised from ``seed``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(widths) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def global_batch(step: int, size: int, seed: int = 0,
                 widths: tuple[int, ...] = WIDTHS) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of the whole (global) batch of ``step``; the same in every process."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    return torch.randn(size, widths[0], generator=g), torch.randn(size, widths[-1], generator=g)


def rank_batch(step: int, rank: int, world_size: int, per_rank_batch: int, seed: int = 0,
               widths: tuple[int, ...] = WIDTHS) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice, rows rank*B to (rank+1)*B - 1 (``x[rank*B:(rank+1)*B]``), of the global batch of ``step``."""
    x, y = global_batch(step, world_size * per_rank_batch, seed, widths)
    rows = slice(rank * per_rank_batch, (rank + 1) * per_rank_batch)
    return x[rows], y[rows]


def flat_grads(model: nn.Module) -> torch.Tensor:
    """Every parameter's .grad in one flat CPU tensor (zeros where a grad is None)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).cpu()
                      for p in model.parameters()])


def flat_params(model: nn.Module) -> torch.Tensor:
    """Every parameter in one flat CPU tensor."""
    return torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])


def gather_flat(tensor: torch.Tensor) -> list[torch.Tensor]:
    """all_gather a flat tensor: every rank gets every rank's copy, in rank order."""
    copies = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, tensor)
    return [c.cpu() for c in copies]


def start_tensor(rank: int, world_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Lesson 01's starting tensor for ``rank``: [10 rank + 1, ..., 10 rank + world_size]."""
    return (torch.arange(1, world_size + 1, dtype=torch.float32) + 10 * rank).to(device)


# ---- lesson 05's data (lesson 09 trains on it too): built in every process from a fixed seed,
# so every rank holds the same samples

DATA_SEED = 1234  # fixed: the data never changes with the training seed
N_SAMPLES = 512  # divisible by 4 ranks x 16: every rank gets whole, equal batches


def make_moons(n_samples: int = N_SAMPLES, noise: float = 0.15, seed: int = DATA_SEED) -> TensorDataset:
    """Two interleaved half-moons in 2-D with labels 0/1 (a small classification task):
    returns a TensorDataset of (x: float32 [n, 2], y: int64 [n])."""
    g = torch.Generator().manual_seed(seed)
    half = n_samples // 2
    angle = torch.rand(n_samples, generator=g) * math.pi
    upper = torch.stack([torch.cos(angle[:half]), torch.sin(angle[:half])], dim=1)
    lower = torch.stack([1 - torch.cos(angle[half:]), 0.5 - torch.sin(angle[half:])], dim=1)
    x = torch.cat([upper, lower]) + noise * torch.randn(n_samples, 2, generator=g)
    y = torch.cat([torch.zeros(half, dtype=torch.long), torch.ones(n_samples - half, dtype=torch.long)])
    # Interleave the classes so that an unshuffled batch still holds both.
    order = torch.randperm(n_samples, generator=g)
    return TensorDataset(x[order], y[order])
