"""Workers for tests/test_template_worker.py: the template's train, with the collectives it ran
counted by torch's profiler, or with a schedule of the learner's. Ranks import this module by name
(see launcher_workers.py)."""

from torch.optim.lr_scheduler import CosineAnnealingLR
from torch.profiler import ProfilerActivity, profile

from ddp_lib.workers import template
from ddp_lib.workers.gradients import c10d_ops


def train_counting_allreduces(rank: int, world_size: int, **kwargs) -> dict:
    """template.train_job(rank, world_size, **kwargs), plus "allreduces": how many all-reduces it ran."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = template.train_job(rank, world_size, **kwargs)
    return {**result, "allreduces": c10d_ops(prof).get("allreduce_", 0)}


def train_with_cosine(rank: int, world_size: int, crash_after_epoch: int = 0, **kwargs) -> dict:
    """template.train_job(rank, world_size, **kwargs) with a learner's schedule filled in: cosine decay
    over the steps the template gives it (the run's, less the warm-up's). With
    crash_after_epoch, rank 0 raises once it has saved that epoch's checkpoint."""
    template.make_scheduler = lambda optimizer, steps: CosineAnnealingLR(optimizer, T_max=steps)
    save = template.save_checkpoint

    def save_then_crash(path: str, state: dict) -> None:
        save(path, state)
        if state["epoch"] == crash_after_epoch:
            raise RuntimeError(f"stopped after epoch {crash_after_epoch}")

    template.save_checkpoint = save_then_crash
    return template.train_job(rank, world_size, **kwargs)


def setup_job_with_one_gpu(rank: int, world_size: int) -> dict:
    """template.setup_job on a machine that (as faked here) shows CUDA with one GPU: with more ranks
    than GPUs it must join on gloo with the CPU, as ddp_lib's own runners do, not nccl."""
    import torch
    import torch.distributed as dist

    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    device = template.setup_job(rank, world_size)
    dist.barrier()
    return {"device": str(device), "backend": dist.get_backend()}
