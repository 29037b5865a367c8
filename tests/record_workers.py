"""Workers that return a tensor, raise, or hang: the same record whichever way their ranks start
(the launcher, torchrun, the two hosts). Imports torch only when returning a tensor."""

import time


def tensor(rank, world_size):
    import torch

    return torch.arange(3) * (rank + 1)


def fails(rank, world_size):
    if rank == 1:
        raise ValueError(f"rank {rank} of {world_size} cannot go on")
    return rank


def hangs(rank, world_size):
    while True:
        time.sleep(0.05)  # the line each rank's stack names


HANG_LINE = 'record_workers.py", line 21 in hangs'  # faulthandler's line for the sleep in hangs()


def returns_or_fails(rank, world_size):
    """Rank 0 prints a line and returns; rank 1 raises once rank 0's result is in its folder, which it
    finds beside its own: ``<parent>/<rank>/`` under the launcher and under torchrun alike."""
    from ddp_lib.launch._record import RESULT_FILE, this_rank_dir

    if rank == 0:
        print("rank 0 returns", flush=True)
        return {"rank": rank, "value": 0.5}
    end = time.monotonic() + 60
    while not (this_rank_dir().parent / "0" / RESULT_FILE).exists() and time.monotonic() < end:
        time.sleep(0.05)
    raise ValueError(f"rank {rank} of {world_size} cannot go on")


def expect_same_record(*runners, hang_timeout: float = 15) -> None:
    """Each runner (``run(name, timeout)``: the workers above on 2 ranks, its results returned or its
    error raised) gives the same tensors, the same WorkerError text and the same stack at a hang. A
    runner's ``hang_timeout`` attribute, if set, replaces ``hang_timeout`` (ranks that start at once
    need less time to reach the hang than ranks that start with a torchrun agent)."""
    import pytest
    import torch

    from ddp_lib.errors import LaunchTimeout, WorkerError

    for run in runners:
        results = run("tensor", 120)
        assert all(isinstance(r, torch.Tensor) for r in results), results
        assert [r.tolist() for r in results] == [[0, 1, 2], [0, 2, 4]]
        with pytest.raises(WorkerError) as failed:
            run("fails", 120)
        assert str(failed.value) == "rank 1 raised ValueError: rank 1 of 2 cannot go on"
        assert failed.value.failures == {1: "ValueError: rank 1 of 2 cannot go on"}
        with pytest.raises(LaunchTimeout) as hung:
            run("hangs", getattr(run, "hang_timeout", hang_timeout))
        assert hung.value.running == [0, 1]
        for rank in (0, 1):
            assert HANG_LINE in hung.value.stacks[rank], hung.value.stacks
