"""A worker for tests/test_template_worker.py: the template's train, with the collectives it ran
counted by torch's profiler. Ranks import this module by name (see launcher_workers.py)."""

from torch.profiler import ProfilerActivity, profile

from ddp_lib.workers import template
from ddp_lib.workers.gradients import c10d_ops


def train_counting_allreduces(rank: int, world_size: int, **kwargs) -> dict:
    """template.train(rank, world_size, **kwargs), plus "allreduces": how many all-reduces it ran."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = template.train(rank, world_size, **kwargs)
    return {**result, "allreduces": c10d_ops(prof).get("allreduce_", 0)}
