"""Rank-dependent control flow (lesson 09): an early stop that one rank decides alone.

Each rank judges "stop now" from its own shard of the data, so the ranks can disagree. A rank that
leaves the loop early stops calling DDP's all-reduce; the other rank's next all-reduce has no partner
and fails at the group's timeout. All-reducing the stop flag with ``ReduceOp.MAX`` makes every rank
stop at the first step any rank asked to.
"""

from __future__ import annotations

from datetime import timedelta


def early_stop(rank: int, world_size: int, agree: bool = True, timeout_s: float = 2.0) -> dict:
    """A DDP loop of up to 6 steps in which rank 1 wants to stop after step 2 and the others after
    step 4 (each from its own shard, say). With ``agree`` the flag is all-reduced with MAX first.

    Returns {"rank", "stopped_after_step"}; without ``agree`` the rank left behind fails instead.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Linear(4, 1).to(device))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        inputs = torch.randn(8, 4).to(device)
        wants_to_stop_after = 2 if rank == 1 else 4  # this rank's own verdict
        for step in range(6):
            optimizer.zero_grad()
            ddp(inputs).square().mean().backward()  # DDP's all-reduce runs in here
            optimizer.step()
            stop = torch.tensor([float(step >= wants_to_stop_after)], device=device)
            if agree:
                dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # stop when any rank asks to
            if stop.item():
                break
        return {"rank": rank, "stopped_after_step": step}
