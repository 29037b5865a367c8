"""Checkpoints that survive a crash: written to a temporary file and renamed into place, so the
latest checkpoint is always a complete one; loaded with ``weights_only=True``.

    save_checkpoint(directory, epoch, {"model": model.state_dict(), ...})   # on rank 0 only
    state = load_latest_checkpoint(directory, map_location=device)           # None if there is none

Defined in ``ddp_lib/workers/train.py`` (so that file runs on its own), named here too.
"""

from ddp_lib.workers.train import (
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_latest_checkpoint,
    save_checkpoint,
)

__all__ = ["checkpoint_path", "latest_checkpoint", "list_checkpoints", "load_checkpoint", "load_latest_checkpoint",
           "save_checkpoint"]
