"""A complete small training job under DDP: generated data, a small classifier, sharded
batches, averaged loss metrics, a progress line on rank 0 (or, for long jobs, a tqdm bar),
checkpoints on rank 0 and resume.

    run_ranks(train, 2, kwargs=dict(epochs=8, batch_size=16, lr=0.1, seed=0))
    torchrun --nproc-per-node 2 -m ddp_lib run train --epochs 8 --json
    python -m ddp_lib run train --world-size 2 --epochs 200 --progress

Everything the job needs is in this file, ``process_group.py`` and ``shared.py`` (the data; and
tqdm for the bar), so the three can be copied into a project and run there.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import threading
import warnings
from typing import Literal, get_args

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group, wrap_ddp
    from ddp_lib.workers.shared import make_moons, param_checksum
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group, wrap_ddp
    from shared import make_moons, param_checksum

# ---- the model

Norm = Literal["none", "batch", "sync"]
NORMS = get_args(Norm)


class AllReduceBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics are those of the global batch (all ranks together),
    the same computation as ``nn.SyncBatchNorm``, written with a differentiable all-reduce."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        channels = x.shape[1]
        count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
        # Sum, sum of squares and count from every rank in one all-reduce; its backward is an
        # all-reduce too, so each rank's gradient includes how its samples moved the statistics.
        stats = dist_fn.all_reduce(torch.cat([x.sum(0), (x * x).sum(0), count]))
        total = stats[-1]
        mean = stats[:channels] / total
        var = stats[channels:2 * channels] / total - mean * mean
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * total / (total - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class MoonsNet(nn.Module):
    """Linear(2, hidden) -> [norm] -> ReLU -> Linear(hidden, 2). ``norm`` is "none", "batch"
    (BatchNorm1d, statistics of this rank's batch) or "sync" (statistics of the global batch)."""

    def __init__(self, hidden: int = 32, norm: Norm = "none") -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
        self.fc1 = nn.Linear(2, hidden)
        self.norm = {"none": nn.Identity(), "batch": nn.BatchNorm1d(hidden),
                     "sync": AllReduceBatchNorm1d(hidden)}[norm]
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.norm(self.fc1(x))))


def to_torch_sync_batchnorm(model: nn.Module) -> nn.Module:
    """On a GPU, swap every batch norm (ours included) for torch's ``nn.SyncBatchNorm``."""
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


# ---- checkpoints: written to a temporary file and renamed into place, so the newest file
# is complete even after a crash mid-write; loaded with weights_only=True.

_NAME = re.compile(r"^epoch_(\d+)\.pt$")
_TMP_PREFIX, _TMP_SUFFIX = ".epoch_", ".tmp"
_TMP_NAME = re.compile(r"^\.epoch_(?:(\d+)_)?.*\.tmp$")  # with the saving process's id (older names: none)


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit


def checkpoint_path(directory: str, epoch: int) -> str:
    """The file name of the checkpoint taken after ``epoch`` completed epochs."""
    return os.path.join(directory, f"epoch_{epoch:03d}.pt")


def save_checkpoint(directory: str, epoch: int, state: dict, keep_last: int | None = None) -> str:
    """Write ``state`` as the checkpoint for ``epoch`` atomically and return its path. Removes
    temporary files a crashed save left behind and, with ``keep_last``, all but the newest
    ``keep_last`` checkpoints up to this one (never this one, never a later epoch's)."""
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be a positive number of checkpoints or None (keep all), got {keep_last!r}")
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory)
    path = checkpoint_path(directory, epoch)
    # Same directory, so os.replace is a rename on one filesystem: atomic. A crash before it
    # leaves only a stray .tmp file, which list_checkpoints ignores and a later save removes.
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


def list_checkpoints(directory: str | None) -> list[str]:
    """Checkpoint file names in ``directory``, oldest epoch first (names only, no paths)."""
    if not directory or not os.path.isdir(directory):
        return []
    names = [name for name in os.listdir(directory) if _NAME.match(name)]
    # By epoch number, not as text: epoch_1000.pt comes after epoch_999.pt.
    return sorted(names, key=lambda name: int(_NAME.match(name).group(1)))


def latest_checkpoint(directory: str | None) -> str | None:
    """The path of the checkpoint with the highest epoch in ``directory``, or None."""
    names = list_checkpoints(directory)
    return os.path.join(directory, names[-1]) if names else None


def load_checkpoint(path: str, map_location: torch.device | str = "cpu") -> dict:
    """Load a checkpoint onto ``map_location`` (this rank's device, never the saving rank's).
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
                               "(save_checkpoint never writes such objects)") from e
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
            state = load_checkpoint(path, map_location)
        except RuntimeError as e:
            skipped.append(path)
            warnings.warn(f"skipped {e}", stacklevel=2)
            continue
        epoch = state.get("epoch") if isinstance(state, dict) else None
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise RuntimeError(f"checkpoint {path} holds epoch {epoch!r}, not a whole number of epochs: "
                               "not a checkpoint save_checkpoint wrote")
        return path, state
    if skipped:
        raise RuntimeError(f"no checkpoint in {directory} loads; unreadable: {', '.join(skipped)}")
    return None


# ---- the training job

ORDER_SHOWN = 6  # how many sample indices per epoch the result reports (enough to see a pattern)


def progress_line(epoch: int, epochs: int, loss: float, width: int = 20) -> str:
    """One text progress bar for a finished epoch, e.g. ``epoch  3/8 [#######-----] loss 0.4213``."""
    done = round(width * epoch / epochs)
    return f"epoch {epoch:>2}/{epochs} [{'#' * done}{'-' * (width - done)}] loss {loss:.4f}"


def progress_bar(steps: int):
    """A tqdm bar over ``steps`` training steps on stderr, for rank 0 of a long job. Under a
    launcher that captures output (ddp_lib's, torchrun's) stderr is a file: the bar's updates
    are carriage returns in it, which ddp_lib's launcher shows as one line updated in place."""
    from tqdm import tqdm  # imported here: only a job with a bar needs tqdm installed

    # One bar in this process: a thread lock is enough. tqdm's default adds a multiprocessing
    # lock, a semaphore that a process ending with os._exit (as ddp_lib's ranks do) never frees.
    tqdm.set_lock(threading.RLock())
    return tqdm(total=steps, desc="train", unit="step", file=sys.stderr)


def train(rank: int, world_size: int, epochs: int = 8, batch_size: int = 16, lr: float = 0.1,
          seed: int = 0, checkpoint_dir: str | None = None, resume: bool = False, set_epoch: bool = True,
          norm: Norm = "none", fail_at_epoch: int = 0, keep_last: int | None = None, progress: bool = False,
          warmup_steps: int = 0) -> dict:
    """Train MoonsNet with SGD (momentum 0.9) under DDP.

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
        warmup_steps: raise the learning rate linearly from lr / warmup_steps to lr over this many steps (0: none).

    Returns {"rank", "attempt" (torchrun's restart count), "start_epoch", "losses" (one per epoch
    so far, averaged over all ranks), "order" (the first sample indices this rank read in each
    epoch it trained), "checksum", "params" (all parameters, flattened)}.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs a checkpoint_dir to resume from")
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be a positive number of checkpoints or None (keep all), got {keep_last!r}")
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)  # the same initial weights everywhere (DDP would broadcast them anyway)
        dataset = make_moons()
        # Each rank reads its own 1/world_size of a permutation that depends on seed + epoch only.
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

        model = MoonsNet(norm=norm)
        if norm == "sync" and device.type == "cuda":
            model = to_torch_sync_batchnorm(model)
        model.to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

        start_epoch, losses = 0, []
        if resume:
            # map_location: tensors saved from rank 0's device land on this rank's device.
            found = load_latest_checkpoint(checkpoint_dir, map_location=device)
            if found is None:
                # Expected on the first attempt of a job torchrun may restart; said, not silent.
                if rank == 0:
                    print("no checkpoint to resume from yet: starting at epoch 1", flush=True)
            else:
                path, state = found
                try:
                    model.load_state_dict(state["model"])  # before DDP, which then broadcasts rank 0's copy
                except RuntimeError as e:  # another model's checkpoint: say which file
                    raise RuntimeError(f"{path}: {e}") from None
                optimizer.load_state_dict(state["optimizer"])
                start_epoch, losses = state["epoch"], list(state["losses"])
                if rank == 0:
                    print(f"resumed from the checkpoint of epoch {start_epoch}", flush=True)
        ddp_model = wrap_ddp(model, device)
        loss_fn = nn.CrossEntropyLoss()

        restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        order = []
        bar = progress_bar(max(0, epochs - start_epoch) * len(loader)) if progress and rank == 0 else None
        for epoch in range(start_epoch, epochs):
            if epoch + 1 == fail_at_epoch and restart == 0 and rank == world_size - 1:
                raise RuntimeError(f"injected failure at epoch {epoch + 1} on rank {rank}")
            if set_epoch:
                sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            order.append(list(sampler)[:ORDER_SHOWN])
            totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, samples
            ddp_model.train()
            for step, (x, y) in enumerate(loader, start=epoch * len(loader)):
                if warmup_steps:
                    # From the global step alone, so a resumed job continues the same schedule.
                    for group in optimizer.param_groups:
                        group["lr"] = lr * min(1.0, (step + 1) / warmup_steps)
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = loss_fn(ddp_model(x), y)
                loss.backward()  # gradients are averaged across ranks here
                optimizer.step()
                totals[0] += loss.detach().double() * len(y)
                totals[1] += len(y)
                if bar is not None:
                    bar.update()
            # The epoch's loss over every rank's samples, not just this rank's shard.
            dist.all_reduce(totals)
            losses.append(round((totals[0] / totals[1]).item(), 6))
            if rank == 0:
                if bar is None:
                    print(progress_line(epoch + 1, epochs, losses[-1]), flush=True)
                else:
                    bar.set_postfix_str(f"epoch {epoch + 1}/{epochs}, loss {losses[-1]:.4f}")
                if checkpoint_dir:
                    # The unwrapped module: keys without "module.", loadable with or without DDP.
                    save_checkpoint(checkpoint_dir, epoch + 1, {
                        "epoch": epoch + 1, "model": ddp_model.module.state_dict(),
                        "optimizer": optimizer.state_dict(), "losses": losses}, keep_last=keep_last)
            if checkpoint_dir:
                dist.barrier()  # nobody reads or crashes past a checkpoint rank 0 has not finished

        if bar is not None:
            bar.close()
        params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
        return {"rank": rank, "attempt": restart, "start_epoch": start_epoch, "losses": losses, "order": order,
                "checksum": param_checksum(model), "params": params.tolist()}

