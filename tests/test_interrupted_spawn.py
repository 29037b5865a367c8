"""Lesson 02: an interrupted mp.spawn. SIGINT to the parent's process group, as Jupyter's stop
button sends it, leaves the ranks that wait inside a collective alive; the parent then stops them.
Real processes: a parent script, 2 spawned ranks on gloo and a third process that sleeps."""

from __future__ import annotations

import sys

import pytest

from ddp_lib.demos.interrupted_spawn import interrupt_spawn
from ddp_lib.process_group import free_port


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a process group is POSIX only")
def test_ranks_waiting_in_a_collective_outlive_the_interrupt_and_a_sleeping_process_does_not():
    printed = interrupt_spawn(f"tcp://127.0.0.1:{free_port()}")
    assert printed.splitlines() == [
        "the parent got KeyboardInterrupt",
        "processes still alive after the interrupt: 2 of 3",
        "their exit codes after terminate(): [-15, -15]",
    ]
