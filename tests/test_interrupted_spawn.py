"""Lesson 02: an interrupted launch of torch's. SIGINT to each process, as Jupyter's stop button sends
it to the kernel's process group, leaves the ranks that wait inside a collective alive; terminate()
then stops them. Real processes: 2 ranks on gloo and a third process that sleeps.
Under ddp_lib.mp.labelled_spawn, the launcher stops such ranks itself."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

import pytest

import ddp_lib.mp
from ddp_lib.demos.interrupted_spawn import (
    interrupt_waiting_ranks,
    interrupt_when_ready,
    still_running,
    wait_for_each_other,
)
from ddp_lib.process_group import free_port


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process group is POSIX only")
def test_ranks_waiting_in_a_collective_outlive_the_interrupt_and_a_sleeping_process_does_not():
    assert interrupt_waiting_ranks(f"tcp://127.0.0.1:{free_port()}") == [
        "the 3 processes were in this process's OS process group (os.getpgid): True",
        "processes still alive after SIGINT: 2 of 3",
        "exit codes of those that ended at SIGINT, by process: {2: 0}",
        "a rerun's rank 0 on the same port: DistNetworkError, EADDRINUSE: address already in use",
        # ipykernel's restart signals the kernel's descendants in its process group, found with psutil
        "the live ones a kernel restart would signal (psutil lists them): 2 of 2"
        if importlib.util.find_spec("psutil") else
        "the live ones a kernel restart would signal: 0 of 2 (psutil is not installed)",
        # the kernel's own list of its live children, which needs no psutil
        "the live ones multiprocessing.active_children() lists: 2 of 2",
        "their exit codes after terminate(): [-15, -15]",
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="process groups are POSIX only")
def test_restart_reach_counts_only_descendants_in_this_process_group():
    import subprocess

    from ddp_lib.demos.interrupted_spawn import _restart_reach

    pytest.importorskip("psutil")
    inside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert _restart_reach([inside.pid]).endswith(": 1 of 1")
        assert _restart_reach([outside.pid]).endswith(": 0 of 1")  # its own session: a restart misses it
        assert _restart_reach([os.getpid()]).endswith(": 0 of 1")  # not a descendant
    finally:
        for process in (inside, outside):
            process.kill()
            process.wait()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to this process is POSIX only here")
def test_ddp_lib_mp_spawn_stops_its_ranks_waiting_in_a_collective_when_interrupted():
    ready_dir = tempfile.mkdtemp(prefix="interrupted-")
    interrupt_when_ready(ready_dir, count=2)
    with pytest.raises(KeyboardInterrupt, match="ranks 0-1 stopped"):
        ddp_lib.mp.labelled_spawn(wait_for_each_other, args=(2, f"tcp://127.0.0.1:{free_port()}", ready_dir), nprocs=2)
    assert len(os.listdir(ready_dir)) == 2  # both ranks had said they were ready
    assert still_running(ready_dir) == []
