"""Checker for lesson 06's exercise: a worker that reads where it runs from torchrun's
environment. The learner writes ``launch_info(rank, world_size) -> dict`` with the keys
``local_rank``, ``local_world_size``, ``node_rank`` and ``world_size``; the checker runs it under
real torchrun as two "nodes" of two processes each, on this machine, so that no rank, local rank
or node rank can be guessed: only the values torchrun sets are right on every rank. A worked
solution is in ``ddp_lib/exercises/solutions/lesson06.py``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from ddp_lib.exercises.checking import Report, worker_name
from ddp_lib.torchrun import run_nodes

# A rank's one-line error as torchrun's children print it. Two ranks writing at once can share
# a line, so a message ends where the next rank's prefix starts.
_RANK_ERROR = re.compile(r"\[rank(\d+)\]:\s*(\w+(?:Error|Exception)\b.*)$")
KEYS = ("world_size", "local_rank", "local_world_size", "node_rank")
HINTS = {"world_size": "WORLD_SIZE (all ranks of all nodes)", "local_rank": "LOCAL_RANK (not RANK)",
         "local_world_size": "LOCAL_WORLD_SIZE (processes on this node)", "node_rank": "GROUP_RANK (this node's rank)"}


def find_problems(results: list, nnodes: int, nproc_per_node: int) -> list[str]:
    """What is wrong in the per-rank dicts of a run of nnodes x nproc_per_node (empty if nothing)."""
    world_size = nnodes * nproc_per_node
    if len(results) != world_size:
        return [f"{len(results)} of {world_size} ranks printed a result; every rank must return a dict"]
    problems = []
    for rank, info in enumerate(results):
        if not isinstance(info, dict) or set(KEYS) - set(info):
            missing = sorted(set(KEYS) - set(info)) if isinstance(info, dict) else list(KEYS)
            problems.append(f"rank {rank}: the result lacks {', '.join(missing)}")
            continue
        expected = {"world_size": world_size, "local_rank": rank % nproc_per_node,
                    "local_world_size": nproc_per_node, "node_rank": rank // nproc_per_node}
        for key in KEYS:
            if info[key] != expected[key]:
                problems.append(f"rank {rank}: {key} is {info[key]!r}, expected {expected[key]}: read {HINTS[key]} "
                                "and convert it with int()")
    return problems


def _first_failure(stderr: str, returncode: int) -> str:
    """What the ranks raised, from torchrun's stderr (each rank's lines are prefixed
    ``[rankN]:``): ``Type: message`` when every rank that got to report raised the same, else the
    lowest rank's, as ``rank N raised Type: message``. torchrun stops the other ranks as soon as
    one fails, so which ranks get to report differs from run to run; the report must not."""
    raised = {}
    # Cut at every rank prefix first: two ranks writing at once can share a line.
    for piece in re.split(r"(?=\[rank\d+\]:)", stderr):
        match = _RANK_ERROR.match(piece.splitlines()[0] if piece else "")
        if match:
            raised.setdefault(int(match.group(1)), match.group(2).strip()[:200])
    if not raised:
        return f"torchrun exited with code {returncode}"
    # Another process's text glued onto a rank's line must not make two same errors differ.
    shortest = min(raised.values(), key=len)
    if all(message.startswith(shortest) for message in raised.values()):
        return f"{shortest} (the same on every rank that reported)"
    rank = min(raised)
    return f"rank {rank} raised {raised[rank]}"


def check_launch_info(launch_info: Callable | str, directory: str | None = None,
                      nnodes: int = 2, nproc_per_node: int = 2) -> Report:
    """Run the learner's ``launch_info`` (the function, or its ``"module:function"`` name,
    importable from ``directory``, default the current one) under torchrun on ``nnodes`` local
    nodes of ``nproc_per_node`` processes; return the report."""
    directory = os.path.abspath(directory or os.getcwd())
    target = launch_info if isinstance(launch_info, str) else worker_name(launch_info)
    path = os.pathsep.join(p for p in (directory, os.environ.get("PYTHONPATH", "")) if p)
    job = run_nodes(["-m", "ddp_lib.torchrun", target], nnodes=nnodes, nproc_per_node=nproc_per_node,
                    env={"PYTHONPATH": path})
    report = Report()
    if job.returncode != 0:
        report.fail(f"the job failed: {_first_failure(job.stderr, job.returncode)}")
        return report
    problems = find_problems(job.results, nnodes, nproc_per_node)
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok(f"on {nnodes} nodes x {nproc_per_node} processes, every rank knows its node, its place on the "
                  "node and the size of the job")
    return report
