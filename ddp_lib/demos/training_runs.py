"""Lesson 05's experiments on the training job of ``ddp_lib/workers/train.py``: the same loop, built
from that file's parts, with the switches a lesson turns on one at a time and the guards a shared
checkpoint directory needs. ``python -m ddp_lib run train`` starts :func:`train_with_switches`.

    run_ranks(train_with_switches, 2, kwargs=dict(epochs=8, checkpoint_dir=d, fail_at_epoch=5))  # a crash on purpose
    run_ranks(train_with_switches, 2, kwargs=dict(epochs=3, set_epoch=False))  # the same order each epoch
    python -m ddp_lib run train --world-size 2 --epochs 200 --progress  # a tqdm bar

What it adds to the copied job: ``fail_at_epoch`` (a crash on a first attempt), ``set_epoch=False``
(the mistake, to see it), ``order`` and ``attempt`` in the result (for plots and tests), a tqdm bar
(with a lock that survives the launcher's ``os._exit``), and checkpoints that are pruned
(``keep_last``), skipped when unreadable, checked for their epoch, and guarded against two jobs in
one directory (:func:`save_epoch_checkpoint`). With none of them on, it computes what the copied
``train`` computes, to the bit (tests/test_train.py).
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import threading
import warnings

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.shared import param_checksum
from ddp_lib.workers.train import Norm, checkpoint_path, list_checkpoints, make_job, progress_line, train_epoch

ORDER_SHOWN = 6  # how many sample indices per epoch the result reports (enough to see a pattern)


def train_with_switches(rank: int, world_size: int, epochs: int = 8, batch_size: int = 16, lr: float = 0.1,
          seed: int = 0, checkpoint_dir: str | None = None, resume: bool = False, set_epoch: bool = True,
          norm: Norm = "none", fail_at_epoch: int = 0, keep_last: int | None = None, progress: bool = False,
          warmup_steps: int = 0) -> dict:
    """Train MoonsNet with SGD (momentum 0.9) under DDP, as ``ddp_lib.workers.train.train`` does, with
    the lesson's switches.

    Args:
        epochs: number of epochs to reach, counting those already in a resumed checkpoint.
        batch_size: samples per rank per step (global batch = world_size x this).
        lr: learning rate.
        seed: seed of the initial weights and of the shuffle.
        checkpoint_dir: directory where rank 0 saves a checkpoint after every epoch (None or "": none).
        resume: continue from the newest readable checkpoint in checkpoint_dir (none yet: say so, start at 1).
        set_epoch: call sampler.set_epoch each epoch (False: the same order every epoch, to show why).
        norm: "none", "batch" (BatchNorm1d, this rank's statistics) or "sync" (statistics of the global batch).
        fail_at_epoch: the last rank raises on reaching this epoch (1-based), on a first attempt only (0: never).
        keep_last: keep only this many newest checkpoints (None: keep all).
        progress: a tqdm bar over the steps on rank 0's stderr (last epoch, its loss) instead of a line per epoch.
        warmup_steps: raise the learning rate linearly from lr / warmup_steps to lr over this many steps
            (0: none), as the template's ``--warmup-steps`` does.

    Returns {"rank", "attempt" (torchrun's restart count), "start_epoch", "losses" (one per epoch
    so far, averaged over all ranks), "order" (the first sample indices this rank read in each
    epoch it trained), "checksum", "params" (all parameters, flattened)}.
    """
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs a checkpoint_dir to resume from")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be a positive number of checkpoints or None (keep all), got {keep_last!r}")
    with process_group(rank, world_size) as device:
        model, optimizer, sampler, loader = make_job(rank, world_size, device, batch_size, lr, seed, norm)
        start_epoch, losses = 0, []
        if resume:
            start_epoch, losses = _resume(checkpoint_dir, model, optimizer, device, rank)
        ddp_model = wrap_ddp(model, device)

        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        order = []
        bar = progress_bar(max(0, epochs - start_epoch) * len(loader)) if progress and rank == 0 else None
        steps = loader if bar is None else StepsOnBar(loader, bar)
        for epoch in range(start_epoch, epochs):
            if epoch + 1 == fail_at_epoch and restart == 0 and rank == world_size - 1:
                raise RuntimeError(f"injected failure at epoch {epoch + 1} on rank {rank}")
            if set_epoch:
                sampler.set_epoch(epoch)
            order.append(list(sampler)[:ORDER_SHOWN])
            losses.append(train_epoch(ddp_model, steps, optimizer, epoch, lr, warmup_steps))
            if rank == 0:
                if bar is None:
                    print(progress_line(epoch + 1, epochs, losses[-1]), flush=True)
                else:
                    bar.set_postfix_str(f"epoch {epoch + 1}/{epochs}, loss {losses[-1]:.4f}")
                if checkpoint_dir:
                    save_epoch_checkpoint(checkpoint_dir, epoch + 1, {
                        "epoch": epoch + 1, "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(), "losses": losses}, keep_last=keep_last)
            if checkpoint_dir:
                dist.barrier()

        if bar is not None:
            bar.close()
        params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
        return {"rank": rank, "attempt": restart, "start_epoch": start_epoch, "losses": losses, "order": order,
                "checksum": param_checksum(model), "params": params.tolist()}


def _resume(directory: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
            rank: int) -> tuple[int, list]:
    """``workers.train.resume_from``, skipping unreadable checkpoints and naming the file that does not fit."""
    found = load_latest_checkpoint(directory, map_location=device)
    if found is None:
        if rank == 0:
            print("no checkpoint to resume from yet: starting at epoch 1", flush=True)
        return 0, []
    path, state = found
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:  # another model's checkpoint: say which file
        raise RuntimeError(f"{path}: {e}") from None
    optimizer.load_state_dict(state["optimizer"])
    if rank == 0:
        print(f"resumed from the checkpoint of epoch {state['epoch']}", flush=True)
    return state["epoch"], list(state["losses"])


# ---- the tqdm bar

def progress_bar(steps: int):
    """A tqdm bar over ``steps`` training steps on stderr, for rank 0 of a long job. Under a
    launcher that captures output (ddp_lib's, torchrun's) stderr is a file: the bar's updates
    are carriage returns in it, which ddp_lib's launcher shows as one line updated in place."""
    from tqdm import tqdm  # imported here: only a job with a bar needs tqdm installed

    # One bar in this process: a thread lock is enough. tqdm's default adds a multiprocessing
    # lock, a semaphore that a process ending with os._exit (as ddp_lib's ranks do) never frees.
    tqdm.set_lock(threading.RLock())
    return tqdm(total=steps, desc="train", unit="step", file=sys.stderr)


class StepsOnBar:
    """``loader``, advancing ``bar`` by one after each step (when the loop asks for the next batch)."""

    def __init__(self, loader, bar) -> None:
        self.loader, self.bar = loader, bar

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            yield batch
            self.bar.update()


# ---- checkpoints in a directory that is not this run's alone

_NAME = re.compile(r"^epoch_(\d+)\.pt$")
_TMP_PREFIX, _TMP_SUFFIX = ".epoch_", ".tmp"
_TMP_NAME = re.compile(r"^\.epoch_(?:(\d+)_)?.*\.tmp$")  # with the saving process's id (older names: none)
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit


def save_epoch_checkpoint(directory: str, epoch: int, state: dict, keep_last: int | None = None) -> str:
    """``workers.train.save_epoch_file`` for ``epoch``, guarded, and its path. Removes temporary files
    a crashed save left behind (never those of a live process's save in progress: two jobs share the
    directory, and a warning says so), names the file when the disk is full, fsyncs the directory,
    warns when the directory holds a later epoch (another run's), and with ``keep_last`` removes all
    but the newest ``keep_last`` checkpoints up to this one (never this one, never a later epoch's)."""
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be a positive number of checkpoints or None (keep all), got {keep_last!r}")
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory)
    path = checkpoint_path(directory, epoch)
    # The saving process's id is in the name: a save in progress is never taken for a stray.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{_TMP_PREFIX}{os.getpid()}_", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        # torch's writer reports a failed write as "unexpected pos"; the OSError it hit says why.
        full = next((x for x in (e, e.__context__) if isinstance(x, OSError) and x.errno in _NO_ROOM), None)
        if full is not None:
            raise OSError(full.errno, f"{full.strerror}: checkpoint {path} could not be written") from e
        raise
    if os.name == "posix":  # the rename is an entry in the directory: fsync that too (Windows cannot open one)
        folder = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    names = list_checkpoints(directory)
    later = [name for name in names if _epoch_of(name) > epoch]
    if later:
        # Another run's, or this one's from before a restart at an earlier epoch: resuming
        # would continue from it. Said once per save, never deleted.
        warnings.warn(f"{directory} also holds {', '.join(later)}, later than epoch {epoch} saved now: another "
                      "run's checkpoints, which a resume would continue from; give each run its own directory",
                      stacklevel=2)
    if keep_last is not None:
        earlier = [name for name in names if _epoch_of(name) < epoch]
        for name in earlier[:max(0, len(earlier) - (keep_last - 1))]:
            os.remove(os.path.join(directory, name))
    return path


def _epoch_of(name: str) -> int:
    return int(_NAME.match(name).group(1))


def _remove_stale_temporaries(directory: str) -> None:
    """Remove the temporary files of saves that crashed; leave those of saves in progress (another
    job writing into this directory), and say that two jobs share it."""
    for name in os.listdir(directory):
        found = _TMP_NAME.match(name)
        if not found:
            continue
        pid = int(found.group(1)) if found.group(1) else None
        if pid is not None and pid != os.getpid() and _process_exists(pid):
            warnings.warn(f"process {pid} is saving a checkpoint into {directory} too: two jobs share this "
                          "directory, and each overwrites the other's checkpoints; give each job its own",
                          stacklevel=3)
            continue
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:  # its writer finished or removed it meanwhile
            pass


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_checkpoint(path: str, map_location: torch.device | str = "cpu") -> dict:
    """The state a checkpoint holds, on ``map_location`` (this rank's device, never the saving rank's).
    A truncated or unreadable file raises RuntimeError naming it."""
    try:
        # weights_only: tensors, plain Python data and an allowlist of torch types are rebuilt; any
        # other global the file names is refused, never imported or called (torch/_weights_only_unpickler.py).
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # torch raises RuntimeError, EOFError or UnpicklingError, by how it is broken
        if "Weights only load failed" in str(e):
            # A complete file that holds more than tensors and plain data (torch's own advice,
            # weights_only=False, would run whatever code the file carries).
            raise RuntimeError(f"checkpoint {path} holds objects other than tensors and plain data, so it was "
                               "not loaded: loading them would call whatever functions the file names "
                               "(save_epoch_file never writes such objects)") from e
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RuntimeError(f"checkpoint {path} is truncated or unreadable: {reason}") from e


def load_latest_checkpoint(directory: str | None,
                           map_location: torch.device | str = "cpu") -> tuple[str, dict] | None:
    """The newest checkpoint in ``directory`` that loads, as (its path, its state), or None if there
    is none. An unreadable newer one is skipped with a warning naming it; if none loads, RuntimeError
    names them all. One whose ``epoch`` is no whole number raises RuntimeError naming it."""
    names = list_checkpoints(directory)
    skipped = []
    for name in reversed(names):
        path = os.path.join(directory, name)
        try:
            state = read_checkpoint(path, map_location)
        except RuntimeError as e:
            skipped.append(path)
            warnings.warn(f"skipped {e}", stacklevel=2)
            continue
        epoch = state.get("epoch") if isinstance(state, dict) else None
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise RuntimeError(f"checkpoint {path} holds epoch {epoch!r}, not a whole number of epochs: "
                               "not a checkpoint save_epoch_file wrote")
        return path, state
    if skipped:
        raise RuntimeError(f"no checkpoint in {directory} loads; unreadable: {', '.join(skipped)}")
    return None
