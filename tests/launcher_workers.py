"""Workers for the launcher's tests: ones that break the rules the launcher must survive."""

import os
import subprocess
import sys
import time


def set_own_port(rank, world_size, port):
    """Sets MASTER_PORT itself, as a tutorial's setup() does, then joins the group."""
    import torch.distributed as dist

    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()
    return rank


def mp_rank(i, scale):
    """The drop-in's calling convention: fn(i, *args)."""
    return i * scale


def start_grandchild(rank, world_size, pid_dir, fail=False):
    """Starts a long-running child process (a shell's sleep) and returns or raises while it runs."""
    child = subprocess.Popen(["sleep", "60"])
    with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(child.pid))
    if fail and rank == 1:
        raise RuntimeError("failing with a child process still running")
    return rank


class _Unloadable:
    """Pickles in the rank, fails to unpickle in the caller."""

    def __reduce__(self):
        return (_refuse, ())


def _refuse():
    raise RuntimeError("refusing to be unpickled")


def unloadable_result(rank, world_size):
    return _Unloadable() if rank == 1 else rank


class _BadMessage(Exception):
    def __str__(self):
        raise TypeError("no message for you")


def raise_bad_message(rank, world_size):
    if rank == 1:
        raise _BadMessage()
    return rank


def print_then_wait(rank, world_size, seconds):
    """Rank 0 prints a line at once and then works for ``seconds``."""
    if rank == 0:
        print("early line from rank 0", flush=True)
    time.sleep(seconds)
    print(f"late line from rank {rank}")
    return rank


def sleep_in_named_function(rank, world_size):
    time.sleep(3600)


def print_python(rank, world_size):
    return sys.executable
