"""Workers with precise annotations, for the command-line tests (``python -m ddp_lib run
cli_workers:NAME`` with this directory on PYTHONPATH)."""

from __future__ import annotations

import os
import time
from typing import Literal


def configured(rank: int, world_size: int, epochs: int = 8, lr: float = 0.1, resume: bool = False,
               shuffle: bool = True, checkpoint_dir: str | None = None, limit: int | None = None,
               norm: Literal["none", "batch", "sync"] = "none", *, batch_size: int = 16) -> dict:
    """Return what this rank was given, so a test can see what the command line passed
    (``batch_size`` is keyword-only: the command line must pass keywords).

    Args:
        epochs: number of epochs to reach
        lr: learning rate
        resume: continue from the latest checkpoint
            in checkpoint_dir, if any
        shuffle: reshuffle every epoch
        checkpoint_dir: where rank 0 writes checkpoints (none: no checkpoints)
        limit: stop after this many steps (none: no limit)
        norm: normalisation layer
        batch_size: samples per rank per step
    """
    return {"rank": rank, "world_size": world_size, "epochs": epochs, "lr": lr, "resume": resume,
            "shuffle": shuffle, "checkpoint_dir": checkpoint_dir, "limit": limit, "norm": norm,
            "batch_size": batch_size}


def needs_path(rank: int, world_size: int, path: str) -> str:
    """Return ``path``, a parameter without a default.

    Args:
        path: a file name
    """
    return path


def diverged(rank: int, world_size: int) -> dict:
    """Return losses that end in nan and inf, as a diverging run does."""
    return {"losses": [1.0, float("inf"), float("nan")], "rank": rank}


def sleep_forever(rank: int, world_size: int, pid_dir: str | None = None) -> int:
    """Record this rank's process id in ``pid_dir``, then sleep until stopped.

    Args:
        pid_dir: directory for one file per rank holding its process id
    """
    if pid_dir:
        with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))
    time.sleep(3600)
    return rank


def torchrun_main(save_every: int, total_epochs: int, batch_size: int = 32) -> None:
    """A torchrun script's main(): it reads its rank from the environment, not from its arguments."""
    raise AssertionError("never called: the command line refuses this signature")


def raise_two_lines(rank: int, world_size: int) -> None:
    """Rank 0 raises an error whose detail is on its second line."""
    if rank == 0:
        raise ValueError("summary:\n\tthe detail")
