"""A rank that skips ``backward()`` once (lesson 07), as a per-rank check such as "skip a batch whose
loss is not finite" would: DDP's gradient all-reduce runs inside ``backward()``, so that rank makes one
collective fewer, and gloo pairs every later one with the others' previous one."""

from __future__ import annotations

from datetime import timedelta


def train_skipping_backward(rank: int, world_size: int, skip_rank: int = 1, skip_step: int = 1, steps: int = 4,
                            batchnorm: bool = False, skip_on_every_rank: bool = False,
                            timeout_s: float = 3.0) -> dict:
    """A DDP loop on a 9-parameter model, a fresh batch per rank and step; rank ``skip_rank`` skips
    ``loss.backward()`` at ``skip_step``. Without buffers, its later gradient all-reduces pair with the
    others' earlier ones, at the same parameters (no error, one batch lost), and it finishes one all-reduce
    early: the others' last one loses its partner. With ``batchnorm=True``, its next forward's buffer
    broadcast meets the others' all-reduce: both wait until the timeout. ``skip_on_every_rank=True`` is
    the fix: the ranks all-reduce the skip flag with MAX, so every rank skips or none does. Prints the
    parameters after each update and the number of backward calls; returns both."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        torch.manual_seed(0)
        linear = torch.nn.Linear(8, 1)
        ddp = DDP(torch.nn.Sequential(torch.nn.BatchNorm1d(8), linear) if batchnorm else linear)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        torch.manual_seed(rank)  # each rank its own batches
        backwards, updates = 0, []
        for step in range(steps):
            inputs = torch.randn(16, 8)
            loss = torch.nn.functional.mse_loss(ddp(inputs), inputs.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            skip = rank == skip_rank and step == skip_step  # the bug: this rank alone skips a step's backward
            if skip_on_every_rank:  # the fix: agree first, so every rank skips or none does
                flag = torch.tensor([float(skip)])
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # 1 if any rank skips
                skip = flag.item() > 0
            if skip:
                continue
            loss.backward()  # DDP's gradient all-reduce runs in here
            optimizer.step()
            backwards += 1
            updates.append(torch.cat([p.detach().flatten() for p in ddp.parameters()]).tolist())
            print(f"rank {rank} parameters after update {backwards}: {updates[-1]}", flush=True)
        print(f"rank {rank} finished, after {backwards} backward calls", flush=True)
        return {"backwards": backwards, "updates": updates}
