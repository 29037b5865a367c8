"""Whether a launch left processes behind (lesson 07): the ids its ranks recorded with
``ddp_lib.workers.faulty_ranks.record_pid``, checked once the launch has returned."""

from __future__ import annotations

import os

from ddp_lib.launch._processes import pid_alive


def still_running(pid_dir: str) -> list[int]:
    """The process ids recorded in ``pid_dir`` that still belong to a live process (a zombie has ended)."""
    alive = []
    for name in sorted(os.listdir(pid_dir)):
        if name.endswith(".pid"):
            with open(os.path.join(pid_dir, name)) as f:
                pid = int(f.read())
            if pid_alive(pid):
                alive.append(pid)
    return alive
