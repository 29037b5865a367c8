"""Workers for the launcher's tests: ones that print, report what they were given, fail in
ways lesson 07 does not show, or break the rules the launcher must survive.

Ranks import this module by name: the launcher gives each rank the caller's ``sys.path``, where
pytest has put this directory (a test that runs code in a fresh interpreter puts it on
``PYTHONPATH``: see ``conftest.tests_on_path``).
"""

import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from ddp_lib.process_group import process_group
from ddp_lib.workers.faulty_ranks import record_pid


def talk(rank, world_size, lines=2, delay=0.0):
    """Print ``lines`` lines to stdout and one to stderr; later ranks finish first when delay > 0."""
    time.sleep(delay * (world_size - 1 - rank))
    for i in range(lines):
        print(f"line {i} from rank {rank}")
    print(f"a warning from rank {rank}", file=sys.stderr)
    return rank * 10


def big_result(rank, world_size, n=100_000):
    """Print nothing and return ``n`` ones (a tensor of 4 * n bytes)."""
    return torch.ones(n)


def report_env(rank, world_size):
    """The launch variables this rank sees, and its thread count."""
    names = ("MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS")
    return {**{n: os.environ.get(n) for n in names}, "threads": torch.get_num_threads(),
            "has_port": os.environ.get("MASTER_PORT", "").isdigit()}


def hang_deaf_to_sigterm(rank, world_size, pid_dir=None):
    """Every rank ignores SIGTERM and sleeps: stopping it takes the launcher's whole grace period."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record_pid(rank, pid_dir)
    time.sleep(3600)
    return rank


def die_on_rank(rank: int, world_size: int, bad_rank: int = 1, pid_dir: str | None = None) -> int:
    """Rank ``bad_rank`` is killed (SIGKILL, as by the out-of-memory killer) without raising;
    the others sleep until the launcher stops them."""
    record_pid(rank, pid_dir)
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    return rank


def hang_all(rank, world_size, pid_dir=None):
    """Every rank sleeps for an hour (the caller interrupts or times out)."""
    record_pid(rank, pid_dir)
    time.sleep(3600)
    return rank


def exit_on_rank(rank, world_size, bad_rank=1, code=3):
    """Rank ``bad_rank`` calls os._exit(code): no exception, no result."""
    if rank == bad_rank:
        os._exit(code)
    return rank


def raise_in_collective(rank, world_size, bad_rank=1):
    """Rank ``bad_rank`` raises while the others wait for it in an all_reduce; their
    collective then breaks too, but the launcher blames ``bad_rank``."""
    with process_group(rank, world_size):
        if rank == bad_rank:
            raise ValueError(f"rank {rank} was told to fail")
        dist.all_reduce(torch.ones(1))
    return rank


def raise_everywhere(rank, world_size):
    """Every rank raises the same error at about the same moment."""
    raise RuntimeError("every rank fails here")


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


def mp_end_early(i, how, bad_rank=1):
    """Rank ``bad_rank`` ends in the way ``how`` names (the drop-in's convention, fn(i, *args))."""
    if i == bad_rank:
        if how == "sys.exit(0)":
            sys.exit(0)
        if how == "exit()":
            exit()
        if how == "os._exit(0)":
            os._exit(0)
        if how == "sys.exit(3)":
            sys.exit(3)
        if how == "sys.exit(text)":
            sys.exit("giving up")
        if how == "SIGABRT":
            os.abort()
        if how == "raise":
            raise ValueError(f"rank {i} was told to fail")
    return i


def start_grandchild(rank, world_size, pid_dir, fail=False, new_session=False, hang=False):
    """Starts a long-running child process (a shell's sleep), in a session of its own if
    ``new_session``, and returns, raises (``fail``, rank 1) or hangs (``hang``) while it runs."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=new_session)
    with open(os.path.join(pid_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(child.pid))
    if fail and rank == 1:
        raise RuntimeError("failing with a child process still running")
    if hang:
        time.sleep(3600)
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


def redraw_a_line(rank, world_size, steps=4, pause=0.3):
    """Every rank redraws one line of stderr with carriage returns, as a progress bar does
    ("step 1/4", "step 2/4", ...), then ends it with a newline."""
    for step in range(1, steps + 1):
        print(f"\rstep {step}/{steps}", end="", file=sys.stderr, flush=True)
        time.sleep(pause)
    print(file=sys.stderr, flush=True)
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


def report_named_env(rank, world_size, names):
    """The values of the environment variables ``names`` on this rank."""
    return {name: os.environ.get(name) for name in names}


def echo_a_peer_failure(rank, world_size):
    """Rank 0 fails as gloo reports a peer that went away; the others never report (they sleep)."""
    if rank == 0:
        import torch.distributed as dist

        raise dist.DistBackendError("Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
                                    "pair.cc:144] Connection closed by peer [127.0.0.1]:41234")
    time.sleep(3600)


def unseeded_draw(rank: int, world_size: int) -> float:
    """A number from torch's default generator, never seeded by the worker."""
    import torch

    return torch.rand(1).item()


def session_child_then_wait(rank, world_size, pid_dir):
    """Start ``sleep`` in a session of its own, record its id and this rank's, and wait to be killed."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.path.join(pid_dir, f"rank{rank}.child"), "w") as f:
        f.write(str(child.pid))
    record_pid(rank, pid_dir)
    time.sleep(3600)
