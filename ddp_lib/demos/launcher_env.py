"""What a rank sees of its launcher: the launcher's variables in its environment, and its threads.

Lesson 00 starts the same worker under torch's launcher and under ``ddp_lib.mp.labelled_spawn``, and
compares what each rank sees with what the notebook's own process has.
"""

from __future__ import annotations

import os

# The variables a launcher may set for its ranks (torch's mp.spawn sets none of them).
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "TORCH_DIST_INIT_BARRIER")


def launcher_env() -> dict:
    """This process's ``LAUNCHER_VARS``, None where unset."""
    return {name: os.environ.get(name) for name in LAUNCHER_VARS}


def launcher_view(rank: int, world_size: int, results=None) -> dict:
    """This rank's ``LAUNCHER_VARS`` (None where unset) and torch's intra-op thread count.

    Returns them as ``{"env": {...}, "threads": n}``; with ``results`` (a queue), also puts
    ``(rank, view)`` there, for a launcher that returns nothing."""
    import torch  # here, so that a module that needs only LAUNCHER_VARS starts without torch

    view = {"env": launcher_env(), "threads": torch.get_num_threads()}
    if results is not None:
        results.put((rank, view))
    return view


def launcher_view_with_fix(rank: int, world_size: int, results=None) -> dict:
    """``launcher_view`` after the two lines lesson 00 tells a worker to start with: each rank takes
    ``usable cores // world_size`` threads (at least 1), never more than torch's default. The view
    also holds ``"default_threads"``, torch's count in the rank before those two lines, so that one
    launch shows both counts."""
    import torch

    default_threads = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(max(1, min(torch.get_num_threads(), cores // world_size)))
    view = {"env": launcher_env(), "threads": torch.get_num_threads(), "default_threads": default_threads}
    if results is not None:
        results.put((rank, view))
    return view


def launcher_table(views: dict[str, list[dict]], parent_env: dict[str, str] | None = None) -> str:
    """One row per ``LAUNCHER_VARS`` entry, one column per launcher in ``views`` (its ranks' views
    in rank order): each rank's value where the launcher set it, "-" where the rank sees what
    ``parent_env`` (default ``os.environ``) holds."""
    parent_env = dict(os.environ) if parent_env is None else parent_env
    width = max(len(name) for name in LAUNCHER_VARS) + 2
    columns = [max(20, len(launcher) + 2) for launcher in views]  # a long launcher name keeps its gap
    lines = ["".ljust(width) + "".join(launcher.ljust(column) for launcher, column in zip(views, columns))]
    for name in LAUNCHER_VARS:
        cells = []
        for rank_views in views.values():
            values = [view["env"][name] for view in rank_views]
            if all(value == parent_env.get(name) for value in values):
                cells.append("-")
            elif name in ("OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME"):
                cells.append("set")  # its value depends on the machine
            else:
                cells.append(", ".join(dict.fromkeys(str(value) for value in values)))
        lines.append(name.ljust(width) + "".join(cell.ljust(column) for cell, column in zip(cells, columns)))
    return "\n".join(line.rstrip() for line in lines)
