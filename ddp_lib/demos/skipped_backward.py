"""A rank that skips ``backward()`` once (lesson 07), as a per-rank check such as "skip a batch whose
loss is not finite" would: DDP's gradient all-reduce runs inside ``backward()``, so that rank makes one
collective fewer, and gloo pairs every later one with the others' previous one."""

from __future__ import annotations

from datetime import timedelta


def train_skipping_backward(rank: int, world_size: int, skip_rank: int = 1, skip_step: int = 1, steps: int = 4,
                            batchnorm: bool = False, timeout_s: float = 3.0) -> int:
    """A DDP loop on a 9-parameter model; rank ``skip_rank`` skips ``loss.backward()`` at ``skip_step``.
    Without buffers, its later gradient all-reduces pair with the others' earlier ones (wrong numbers,
    no error), and it finishes one all-reduce early: the others' last one loses its partner. With
    ``batchnorm=True``, its next forward's buffer broadcast meets the others' all-reduce: both wait
    until the timeout. Prints and returns how many times this rank called backward."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        torch.manual_seed(0)
        linear = torch.nn.Linear(8, 1)
        ddp = DDP(torch.nn.Sequential(torch.nn.BatchNorm1d(8), linear) if batchnorm else linear)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        inputs = torch.randn(16, 8)
        targets = inputs.sum(dim=1, keepdim=True)
        backwards = 0
        for step in range(steps):
            loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
            optimizer.zero_grad()
            if rank == skip_rank and step == skip_step:  # the bug: this rank alone skips a step's backward
                continue
            loss.backward()  # DDP's gradient all-reduce runs in here
            optimizer.step()
            backwards += 1
        print(f"rank {rank} finished, after {backwards} backward calls", flush=True)
        return backwards
