"""Faulty ranks: workers where one chosen rank raises, is killed, dies in a collective or hangs (lesson 07;
the classic mistakes that break a job are in ``failure_lab.py``).

``raise_on_rank`` and ``hang_on_rank`` record their process id in ``pid_dir`` (when given), so
that ``ddp_lib.demos.leftovers`` can show afterwards that the launcher left no process behind;
``die_in_collective`` writes when each rank noticed the death to ``record_dir`` (read with
:func:`read_records`). The launcher's tests use them too.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta


def raise_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None,
                  others_busy_s: float = 0.0) -> int:
    """Rank ``bad_rank`` raises ValueError; the others work ``others_busy_s`` seconds (asleep), then
    return their rank.

    Args:
        bad_rank: the rank that raises.
        pid_dir: a directory where each rank writes its process id (None: nowhere).
        others_busy_s: how long the other ranks stay busy: long enough, and the launcher must stop them.
    """
    record_pid(rank, pid_dir)
    if rank == bad_rank:
        raise ValueError(f"rank {rank} was told to fail")
    time.sleep(others_busy_s)
    return rank


def kill_on_rank(rank: int, world_size: int, bad_rank: int = 1, others_busy_s: float = 0.0) -> int:
    """Rank ``bad_rank`` kills itself with SIGKILL, as the out-of-memory killer would: no exception,
    no traceback. The others work ``others_busy_s`` seconds (asleep), then return their rank."""
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(others_busy_s)
    return rank


def die_in_collective(rank: int, world_size: int, record_dir: str, bad_rank: int = 1,
                      timeout_s: float = 3.0) -> None:
    """Every rank all-reduces in a loop; ``bad_rank`` is SIGKILLed in the middle of it, while the
    others wait in an all-reduce for its part. Each rank writes to ``record_dir`` when it noticed
    (``time.monotonic()``, the same clock in every process of a machine): the dead rank just before
    it dies, a survivor when its collective raised."""
    # The launcher stops the survivors (SIGTERM) soon after the death; ignore that here so that
    # each survivor's own collective is what tells it, as on a cluster where nobody stops it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch
    import torch.distributed as dist

    try:  # inside the ddp_lib package
        from ddp_lib.process_group import process_group
    except ModuleNotFoundError:  # copied into a project next to process_group.py
        from process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        data = torch.zeros(1 << 16)
        dist.all_reduce(data)  # every connection is open before anyone dies
        dies_at = time.monotonic() + 0.3
        try:
            while True:
                if rank == bad_rank and time.monotonic() >= dies_at:
                    # Killed between two all-reduces, as the others wait for its part of the next.
                    time.sleep(0.1)
                    _die_now(record_dir, rank)
                dist.all_reduce(data)
        except RuntimeError as exc:
            _write_record(record_dir, rank, {"failed_at": time.monotonic(), "error": str(exc)})
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # noticed: the launcher may stop it now
            raise


def hang_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` loops forever in Python; the others return at once.

    Args:
        bad_rank: the rank that hangs.
        pid_dir: a directory where each rank writes its process id (None: nowhere).
    """
    record_pid(rank, pid_dir)
    while rank == bad_rank:
        time.sleep(0.05)
    return rank


# ---- helpers


def record_pid(rank: int, pid_dir: str | None) -> None:
    """Write this process's id to ``pid_dir/rank<rank>.pid`` (nothing when ``pid_dir`` is None)."""
    if pid_dir:
        with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))


def _die_now(record_dir: str, rank: int) -> None:
    _write_record(record_dir, rank, {"died_at": time.monotonic()})
    os.kill(os.getpid(), signal.SIGKILL)


def _write_record(record_dir: str, rank: int, record: dict) -> None:
    with open(os.path.join(record_dir, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


def read_records(record_dir: str) -> dict[int, dict]:
    """What :func:`die_in_collective` wrote, by rank."""
    records = {}
    for name in sorted(os.listdir(record_dir)):
        with open(os.path.join(record_dir, name)) as f:
            records[int(name.removeprefix("rank").removesuffix(".json"))] = json.load(f)
    return records
