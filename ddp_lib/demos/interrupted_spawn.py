"""What an interrupted ``mp.spawn`` leaves behind (lesson 02).

A parent script starts 3 processes with torch's ``mp.spawn``. Ranks 0 and 1 join a group, then each
waits to receive from the other: a job that hangs inside torch. Process 2 only sleeps, in Python.
``interrupt_spawn`` then does what a notebook's stop button does, SIGINT to the parent's whole
process group, and reports what the parent sees: the processes still alive after the interrupt
(once one has ended, or after 30 s, then half a second more), and their exit codes once it stops them.

``interrupt_when_ready`` and ``still_running`` show the same interrupt under ``ddp_lib.mp.spawn``, in the
notebook's own process: SIGINT to the kernel while its ranks wait in the same receive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta

PARENT = """
import multiprocessing, sys, time
import torch.multiprocessing as mp
from ddp_lib.demos.interrupted_spawn import wait_for_each_other

if __name__ == "__main__":
    try:
        # ranks 0 and 1 wait to receive from each other; process 2 sleeps in Python
        mp.spawn(wait_for_each_other, args=(2, sys.argv[1], sys.argv[2]), nprocs=3)
    except KeyboardInterrupt:
        print("the parent got KeyboardInterrupt", flush=True)
    deadline = time.monotonic() + 30.0  # a busy machine can take seconds to act on SIGINT
    while len(multiprocessing.active_children()) == 3 and time.monotonic() < deadline:
        time.sleep(0.1)  # wait until one child has ended, or 30 s
    time.sleep(0.5)  # then half a second more for the others to react too
    alive = multiprocessing.active_children()  # the children this process started, still alive
    print("processes still alive after the interrupt:", len(alive), "of 3", flush=True)
    for child in alive:  # the clean-up: the parent stops what it started
        child.terminate()
        child.join()
    print("their exit codes after terminate():", [child.exitcode for child in alive], flush=True)
"""


def _say_ready(ready_dir: str, rank: int) -> None:
    """Write this process's id to ``ready_dir/rank<rank>``, whole: written aside, then renamed."""
    path = os.path.join(ready_dir, f"rank{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def _ready_pids(ready_dir: str) -> list[int]:
    return [int(open(os.path.join(ready_dir, name)).read()) for name in sorted(os.listdir(ready_dir))
            if not name.endswith(".tmp")]


def interrupt_when_ready(ready_dir: str, count: int, timeout: float = 300.0) -> threading.Thread:
    """Start a thread that waits until ``count`` processes have said they are ready in ``ready_dir``,
    then sends SIGINT to this process, as Jupyter's stop button does to the kernel. It sends nothing
    if they are not ready within ``timeout`` seconds. POSIX only."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while len(_ready_pids(ready_dir)) < count:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        time.sleep(0.2)  # each has written its file: let it reach its wait
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def still_running(ready_dir: str) -> list[int]:
    """The ids of the processes that said they were ready in ``ready_dir`` and still run."""
    from ddp_lib.launch._processes import pid_alive

    return [pid for pid in _ready_pids(ready_dir) if pid_alive(pid)]


def wait_for_each_other(rank: int, world_size: int, init_method: str, ready_dir: str) -> None:
    """Ranks below ``world_size``: join a gloo group, say so with a file in ``ready_dir``, then wait
    to receive from the next rank, which waits too: a hang that only the group's timeout (120 s
    here) would end. Any other process: say so, then sleep in Python, outside the group."""
    import torch
    import torch.distributed as dist

    if rank >= world_size:
        _say_ready(ready_dir, rank)
        time.sleep(120)
        return

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=120))
    waiting = dist.irecv(torch.zeros(1), src=(rank + 1) % world_size)  # no rank sends: never arrives
    _say_ready(ready_dir, rank)
    waiting.wait()  # every rank waits here, inside torch's C++ code


def interrupt_spawn(init_method: str, timeout: float = 300.0) -> str:
    """Run ``PARENT`` in its own process group; once its 3 children wait, send SIGINT to the group, as
    Jupyter's stop button does to the kernel's group. Returns what the parent printed."""
    with tempfile.TemporaryDirectory() as ready_dir:
        parent = subprocess.Popen([sys.executable, "-c", PARENT, init_method, ready_dir],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  start_new_session=True)  # its own group, as a kernel has
        deadline = time.monotonic() + timeout
        while len(os.listdir(ready_dir)) < 3 and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
        time.sleep(1.0)  # each process has written its file: let it reach its wait
        os.killpg(parent.pid, signal.SIGINT)  # the stop button: the parent and every rank get SIGINT
        printed, _ = parent.communicate(timeout=timeout)
    return printed
