"""Lesson 09's rank-0-only evaluation carried over to FSDP2 (lesson 10): it hangs.

Under FSDP2 a forward all-gathers each unit's sharded parameters, a collective every rank must
join. When rank 0 alone evaluates and the others wait for it at a barrier, rank 0's all-gather has
no partner, and both ranks fail at the group's timeout.

With ``detail=True`` the worker sets torch's distributed debug level to DETAIL before the group
is created (what ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` does when set before the ranks start). The
group then checks, before each collective, that every rank calls the same one, and the error names
the collective each rank was in.
"""

from __future__ import annotations

from datetime import timedelta


def rank0_evaluation(rank: int, world_size: int, timeout_s: float = 2.0, detail: bool = True) -> dict:
    """One training step of a sharded 2-layer model on every rank, then lesson 09's pattern:
    ``if rank == 0: evaluate(model)``, then ``dist.barrier()`` on every rank.

    Returns {"rank", "evaluated"} if the evaluation ever finishes; it does not.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from ddp_lib.process_group import process_group

    if detail:  # read when the group is created: each collective is then checked against the other ranks'
        dist.set_debug_level(dist.DebugLevel.DETAIL)
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        torch.manual_seed(0)  # the same on every rank: fully_shard broadcasts no initial weights
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        fully_shard(model)  # parameters now sharded: each forward all-gathers them
        x = torch.randn(4, 8)
        model(x).square().mean().backward()  # a training step's forward and backward, on every rank
        if rank == 0:
            with torch.no_grad():
                model(x)  # the evaluation, on rank 0 alone: its forward all-gathers
        dist.barrier()  # the other ranks wait here for rank 0
        return {"rank": rank, "evaluated": rank == 0}
