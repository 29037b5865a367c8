"""Workers that misbehave on purpose, on one chosen rank: raise, die, hang, or print.

The tests use them to check that the launcher names the rank, stops the job and leaves
nothing running; the failure lab shows them to learners. Each records its process id in
``pid_dir`` (when given) so a test can check afterwards that no process is left.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _record_pid(rank: int, pid_dir: str | None) -> None:
    if pid_dir:
        with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))


def raise_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` raises ValueError; the others return their rank.

    Args:
        bad_rank: the rank that raises.
        pid_dir: a directory where each rank writes its process id (None: nowhere).
    """
    _record_pid(rank, pid_dir)
    if rank == bad_rank:
        raise ValueError(f"rank {rank} was told to fail")
    return rank


def die_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` is killed (SIGKILL, as by the out-of-memory killer) without raising;
    the others wait, as they would in a collective."""
    _record_pid(rank, pid_dir)
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    return rank


def exit_on_rank(rank: int, world_size: int, bad_rank: int = 1, code: int = 3) -> int:
    """Rank ``bad_rank`` calls os._exit(code): no exception, no result."""
    if rank == bad_rank:
        os._exit(code)
    return rank


def hang_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` loops forever in Python; the others return at once.

    Args:
        bad_rank: the rank that hangs.
        pid_dir: a directory where each rank writes its process id (None: nowhere).
    """
    _record_pid(rank, pid_dir)
    while rank == bad_rank:
        time.sleep(0.05)
    return rank


def hang_all(rank: int, world_size: int, pid_dir: str | None = None) -> int:
    """Every rank sleeps for an hour (the caller interrupts or times out)."""
    _record_pid(rank, pid_dir)
    time.sleep(3600)
    return rank


def talk(rank: int, world_size: int, lines: int = 2, delay: float = 0.0) -> int:
    """Print ``lines`` lines to stdout and one to stderr; later ranks finish first when delay > 0."""
    time.sleep(delay * (world_size - 1 - rank))
    for i in range(lines):
        print(f"line {i} from rank {rank}")
    print(f"a warning from rank {rank}", file=sys.stderr)
    return rank * 10


def report_env(rank: int, world_size: int) -> dict:
    """The launch variables this rank sees, and its thread count."""
    import torch

    names = ("MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS")
    return {**{n: os.environ.get(n) for n in names}, "threads": torch.get_num_threads(),
            "has_port": os.environ.get("MASTER_PORT", "").isdigit()}


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


def raise_in_collective(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """Rank ``bad_rank`` raises while the others wait for it in an all_reduce; their
    collective then breaks too, but the launcher blames ``bad_rank``."""
    import torch
    import torch.distributed as dist

    try:  # inside the ddp_lib package
        from ddp_lib.process_group import process_group
    except ModuleNotFoundError:  # copied into a project next to process_group.py
        from process_group import process_group

    with process_group(rank, world_size):
        if rank == bad_rank:
            raise ValueError(f"rank {rank} was told to fail")
        dist.all_reduce(torch.ones(1))
    return rank


def raise_everywhere(rank: int, world_size: int) -> int:
    """Every rank raises the same error at about the same moment."""
    raise RuntimeError("every rank fails here")
