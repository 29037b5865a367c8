"""Small models the lessons train: quick on a laptop CPU, the same code on a GPU."""

from __future__ import annotations

import torch
from torch import nn


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
