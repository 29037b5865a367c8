"""What an interrupted ``mp.spawn`` leaves behind (lesson 02).

``interrupt_waiting_ranks`` starts 3 processes with torch's launcher. Ranks 0 and 1 join a group, then
each waits to receive from the other: a job that hangs inside torch. Process 2 only sleeps, in Python.
It then does to each what a notebook's stop button does to every process of the kernel's process
group, SIGINT, and reports the processes still alive after the interrupt (once one has ended, or
after 30 s, then 0.3 s more), the exit codes of those that ended, what rank 0 of a rerun meets on
the same port while they live, how many of them a kernel restart would signal, and their exit codes
once it stops them.

``interrupt_when_ready`` and ``still_running`` show the same interrupt under ``ddp_lib.mp.labelled_spawn``, in the
notebook's own process: SIGINT to the kernel while its ranks wait in the same receive.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import tempfile
import threading
import time
from datetime import timedelta


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
        # As in a kernel's children: Ctrl-C raises KeyboardInterrupt. A forkserver started by a process
        # that ignores or blocks SIGINT (a test runner's worker, say) passes that on through its exec.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        _say_ready(ready_dir, rank)
        time.sleep(120)
        return

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=120))
    waiting = dist.irecv(torch.zeros(1), src=(rank + 1) % world_size)  # no rank sends: never arrives
    _say_ready(ready_dir, rank)
    waiting.wait()  # every rank waits here, inside torch's C++ code


def interrupt_waiting_ranks(init_method: str, timeout: float = 300.0) -> list[str]:
    """Do to 3 processes of torch's launcher what Jupyter's stop button does to the kernel's, and
    report what is left. POSIX only.

    ``start_processes`` starts them from the forkserver, so that none imports torch again, and
    returns at once (``join=False``). Ranks 0 and 1 wait to receive from each other; process 2
    sleeps in Python. Once all 3 wait, each gets SIGINT, as every process in the kernel's process
    group does. The processes still alive are counted once one has ended (or after 30 s), and
    0.3 s later, with the exit codes of those that ended. While they live, rank 0 of a rerun tries
    the same port, in this process, as a rerun of the cell would, ``os.getpgid`` says whether they
    share this process's OS process group, and ``_restart_reach`` counts those
    that ipykernel's restart would signal, and those ``multiprocessing.active_children()`` lists
    (without psutil, a learner stops these by hand). Then ``terminate()`` stops them. Returns the
    seven lines to print."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as ready_dir:
        context = mp.start_processes(wait_for_each_other, args=(2, init_method, ready_dir), nprocs=3,
                                     join=False, start_method="forkserver")
        processes = context.processes
        deadline = time.monotonic() + timeout
        while len(_ready_pids(ready_dir)) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # each has written its file: let it reach its wait
        in_group = all(os.getpgid(process.pid) == os.getpgrp() for process in processes)
        for process in processes:
            os.kill(process.pid, signal.SIGINT)  # what the stop button sends each process of the group
        deadline = time.monotonic() + 30.0  # a busy machine can take seconds to act on SIGINT
        while all(process.is_alive() for process in processes) and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until one has ended, or 30 s
        time.sleep(0.3)  # then a little more for the others to react too
        alive = [process for process in processes if process.is_alive()]
        rerun = _rerun_rank_0(init_method)  # while the ranks live: rank 0 still serves the store
        reach = _restart_reach([process.pid for process in alive])  # while they live, too
        listed = {child.pid for child in multiprocessing.active_children()}  # what a learner can stop by hand
        listed_line = (f"the live ones multiprocessing.active_children() lists: "
                       f"{sum(process.pid in listed for process in alive)} of {len(alive)}")
        for process in alive:  # the clean-up: stop what was started, all at once
            process.terminate()
        for process in processes:
            process.join()
    ended = {i: process.exitcode for i, process in enumerate(processes) if process not in alive}
    return [f"the 3 processes were in this process's OS process group (os.getpgid): {in_group}",
            f"processes still alive after SIGINT: {len(alive)} of 3",
            f"exit codes of those that ended at SIGINT, by process: {ended}",
            f"a rerun's rank 0 on the same port: {rerun}",
            reach,
            listed_line,
            f"their exit codes after terminate(): {[process.exitcode for process in alive]}"]


def _restart_reach(pids: list[int]) -> str:
    """How many of ``pids`` a kernel restart would signal, if this process were the kernel.

    ipykernel 7.4's restart sends SIGTERM, then SIGKILL, to the processes that its
    ``_process_children`` (``ipykernel/kernelbase.py``) lists: with psutil, every descendant of the
    kernel that is in the kernel's process group; without psutil, none. This reads the same list."""
    try:
        import psutil
    except ImportError:
        return f"the live ones a kernel restart would signal: 0 of {len(pids)} (psutil is not installed)"
    group, in_reach = os.getpgrp(), set()
    for child in psutil.Process().children(recursive=True):
        try:
            if os.getpgid(child.pid) == group:
                in_reach.add(child.pid)
        except OSError:  # it has ended since
            pass
    found = sum(pid in in_reach for pid in pids)
    return f"the live ones a kernel restart would signal (psutil lists them): {found} of {len(pids)}"


def _rerun_rank_0(init_method: str) -> str:
    """What a rerun of the cell meets: rank 0's ``init_process_group`` on ``init_method``, here in
    this process. Returns the error's name, or "joined" if the port was free."""
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=2,
                                timeout=timedelta(seconds=10))
    except dist.DistError as e:
        found = re.search(r"name: (\w+), message: ([^,\n]+)", str(e))
        return f"{type(e).__name__}, {found[1]}: {found[2]}" if found else f"{type(e).__name__}: {e}"
    dist.destroy_process_group()
    return "joined"
