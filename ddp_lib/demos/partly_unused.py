"""Lesson 04's partly unused parameter: a head that only rank 1 uses. Without
``find_unused_parameters`` the rank that skips the head cannot finish its reduction, and its next
forward raises, while the other rank waits in ``backward()`` for the group's timeout; with it, that
rank sends zeros for the head, so every rank ends with the average of the used rank's gradient and
zeros."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group


class TrunkAndHead(nn.Module):
    """A trunk every rank uses and a head ``b`` used only when ``use_b``."""

    def __init__(self):
        super().__init__()
        self.trunk, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x, use_b: bool):
        h = self.trunk(x)
        return h.sum(dim=1, keepdim=True) + (self.b(h) if use_b else 0)


def head_used_by_rank_1(rank: int, world_size: int, find_unused_parameters: bool = False, steps: int = 2,
                        timeout_s: float = 3.0) -> dict:
    """Run ``steps`` steps where only rank 1 uses head ``b``. Returns this rank's own gradient of
    ``b.weight`` (computed without DDP; None where b is unused) and the one DDP leaves in ``.grad``
    after the first step, both rounded to 4 places.

    Args:
        timeout_s: the group's timeout. A rank whose forward raises prints its error and stays
            alive past it, so that a rank left waiting in ``backward()`` reaches the timeout.
    """
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        torch.manual_seed(0)
        plain = TrunkAndHead().to(device)
        model = DDP(plain, device_ids=[device.index] if device.type == "cuda" else None,
                    find_unused_parameters=find_unused_parameters)
        torch.manual_seed(1 + rank)
        x, use_b = torch.randn(8, 4, device=device), rank == 1
        own = torch.autograd.grad(plain(x, use_b).sum(), plain.b.weight, allow_unused=True)[0]
        after = None
        for step in range(steps):
            model.zero_grad(set_to_none=True)
            try:
                loss = model(x, use_b).sum()
            except RuntimeError as e:  # the previous reduction did not finish on this rank
                print(f"{type(e).__name__}: {str(e).split('. ')[0]}.", flush=True)
                time.sleep(timeout_s + 30)  # alive, so the other rank waits out its timeout; stopped then
                raise
            loss.backward()
            if step == 0:
                grad = plain.b.weight.grad
                after = None if grad is None else [round(v, 4) for v in grad.flatten().tolist()]
        return {"uses_b": use_b, "own": None if own is None else [round(v, 4) for v in own.flatten().tolist()],
                "after_ddp": after}
