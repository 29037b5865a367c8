"""Generated datasets for the training lessons: built in every process from a fixed seed,
so every rank holds the same samples and nothing is downloaded."""

from __future__ import annotations

import math

import torch
from torch.utils.data import TensorDataset

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
