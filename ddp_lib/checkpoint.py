"""Checkpoints that survive a crash: written to a temporary file and renamed into place, so
the latest checkpoint is always a complete one; loaded with ``weights_only=True``.

    save_checkpoint(directory, epoch, {"model": model.state_dict(), ...})   # on rank 0 only
    state = load_checkpoint(latest_checkpoint(directory), map_location=device)
"""

from __future__ import annotations

import os
import re
import tempfile

import torch

_NAME = re.compile(r"^epoch_(\d+)\.pt$")


def checkpoint_path(directory: str, epoch: int) -> str:
    """The file name of the checkpoint taken after ``epoch`` completed epochs."""
    return os.path.join(directory, f"epoch_{epoch:03d}.pt")


def save_checkpoint(directory: str, epoch: int, state: dict) -> str:
    """Write ``state`` as the checkpoint for ``epoch`` atomically; return its path."""
    os.makedirs(directory, exist_ok=True)
    path = checkpoint_path(directory, epoch)
    # Same directory, so os.replace is a rename on one filesystem: atomic. A crash before it
    # leaves only a stray .tmp file, which latest_checkpoint ignores.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".epoch_", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint file names in ``directory``, oldest epoch first (names only, no paths)."""
    if not directory or not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory) if _NAME.match(name))


def latest_checkpoint(directory: str) -> str | None:
    """The path of the checkpoint with the highest epoch in ``directory``, or None."""
    names = list_checkpoints(directory)
    return os.path.join(directory, names[-1]) if names else None


def load_checkpoint(path: str, map_location: torch.device | str = "cpu") -> dict:
    """Load a checkpoint onto ``map_location`` (this rank's device, never the saving rank's)."""
    # weights_only: tensors, numbers, strings and containers only; no arbitrary code on load.
    return torch.load(path, map_location=map_location, weights_only=True)
