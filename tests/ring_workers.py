"""Workers for tests/test_ring.py (in a module so that launched ranks can import them)."""

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group
from ddp_lib.workers.ring import ring_all_reduce


def ring_int64_2d(rank, world_size, shape):
    """Exact check on integers, on a 2-D tensor: returns (ring result, dist.all_reduce result)."""
    with process_group(rank, world_size):
        generator = torch.Generator().manual_seed(rank)
        mine = torch.randint(-1000, 1000, shape, generator=generator)
        ours, reference = mine.clone(), mine.clone()
        ring_all_reduce(ours)
        dist.all_reduce(reference)
        return ours.tolist(), reference.tolist()


def ring_in_subgroup(rank, world_size):
    """The ring over the odd ranks only: returns this rank's result (None outside the group)."""
    with process_group(rank, world_size):
        odds = dist.new_group(list(range(1, world_size, 2)))
        if rank % 2 == 0:
            return None
        tensor = torch.full((5,), float(rank))
        ring_all_reduce(tensor, group=odds)
        return tensor.tolist()
