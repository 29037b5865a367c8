"""Workers that misbehave on purpose, on one chosen rank: raise, die or hang (lesson 07).

Each records its process id in ``pid_dir`` (when given), so that ``still_running`` can show
afterwards that the launcher left no process behind. The launcher's tests use them too.
"""

from __future__ import annotations

import os
import signal
import time


def record_pid(rank: int, pid_dir: str | None) -> None:
    """Write this process's id to ``pid_dir/rank<rank>.pid`` (nothing when ``pid_dir`` is None)."""
    if pid_dir:
        with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))


def raise_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` raises ValueError; the others return their rank.

    Args:
        bad_rank: the rank that raises.
        pid_dir: a directory where each rank writes its process id (None: nowhere).
    """
    record_pid(rank, pid_dir)
    if rank == bad_rank:
        raise ValueError(f"rank {rank} was told to fail")
    return rank


def die_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` is killed (SIGKILL, as by the out-of-memory killer) without raising;
    the others wait, as they would in a collective."""
    record_pid(rank, pid_dir)
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    return rank



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





def still_running(pid_dir: str) -> list[int]:
    """The process ids recorded in ``pid_dir`` that still belong to a live process."""
    alive = []
    for name in sorted(os.listdir(pid_dir)):
        if name.endswith(".pid"):
            with open(os.path.join(pid_dir, name)) as f:
                pid = int(f.read())
            if process_alive(pid):
                alive.append(pid)
    return alive


def process_alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # on Linux, a zombie has exited and only waits to be reaped
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return True
