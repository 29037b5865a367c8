"""Checker for lesson 06's exercise: a worker that reads where it runs from torchrun's
environment. The learner writes ``launch_info(rank, world_size) -> dict`` with the keys
``local_rank``, ``local_world_size``, ``node_rank`` and ``world_size``, as ints. The checker runs
it under real torchrun on three layouts of "nodes" on this machine: one process then two, two then
one, and three nodes of one, one and two. A rank's place differs between the first two (rank 1 is
node 1's first process in one, node 0's second in the other), so nothing computed from ``rank`` and
``world_size`` alone is right in both; the third has another world size and a third node, so no
size or node count can be written in. The layouts run in an order drawn afresh each time, and each
node's rank is drawn afresh too (the nodes' log folders are named in start order, not by node rank),
so an answer that counts its calls can only guess. A worked solution is in
``ddp_lib/exercises/solutions/lesson06.py``. Each mistake gets one line: values left as text, and
each key whose value is wrong, with the variable to read."""

from __future__ import annotations

import os
import random
from collections.abc import Callable

from ddp_lib.errors import WorkerError
from ddp_lib.exercises.checking import Report, worker_name
from ddp_lib.torchrun import run_nodes

KEYS = ("world_size", "local_rank", "local_world_size", "node_rank")
HINTS = {"world_size": "WORLD_SIZE (all ranks of all nodes)", "local_rank": "LOCAL_RANK (not RANK)",
         "local_world_size": "LOCAL_WORLD_SIZE (processes on this node)",
         "node_rank": "GROUP_RANK (this node's rank; torchrun sets no NODE_RANK for its workers)"}


# Processes on node 0, node 1, ... (by node rank): rank 1 is on node 1 in the first layout and on
# node 0 in the second; the third has three nodes and a world size of 4, not 3.
LAYOUTS = ((1, 2), (2, 1), (1, 1, 2))


def expected_layout(node_sizes: tuple[int, ...]) -> list[dict]:
    """What each rank must answer when node n (by node rank) runs node_sizes[n] processes."""
    world_size = sum(node_sizes)
    return [{"world_size": world_size, "local_rank": local_rank, "local_world_size": size, "node_rank": node}
            for node, size in enumerate(node_sizes) for local_rank in range(size)]


def find_problems(results: list, node_sizes: tuple[int, ...]) -> list[str]:
    """What is wrong in the per-rank dicts of a run whose node n runs node_sizes[n] processes: one
    sentence per mistake (text not converted; each key with a wrong value), empty if nothing."""
    expected_by_rank = expected_layout(node_sizes)
    if len(results) != len(expected_by_rank):
        return [f"{len(results)} of {len(expected_by_rank)} ranks returned a result; every rank must return a dict"]
    for rank, info in enumerate(results):
        if not isinstance(info, dict) or set(KEYS) - set(info):
            missing = sorted(set(KEYS) - set(info)) if isinstance(info, dict) else list(KEYS)
            return [f"rank {rank}: the result lacks {', '.join(missing)}"]
    problems = []
    typed = [(rank, key, info[key]) for rank, info in enumerate(results) for key in KEYS if type(info[key]) is not int]
    if typed:  # one line for them all: the same fix
        rank, key, value = typed[0]
        problems.append(f"values must be ints, but rank {rank}'s {key} is {value!r} ({type(value).__name__}): "
                        "environment variables are strings; convert each with int()")
    for key in KEYS:
        wrong = [(rank, info[key], want[key]) for rank, (info, want) in enumerate(zip(results, expected_by_rank))
                 if _as_int(info[key]) != want[key]]
        if wrong:
            rank, got, want = wrong[0]
            problems.append(f"rank {rank}: {key} is {got!r}, expected {want}: read {HINTS[key]}")
    return problems


def _as_int(value: object) -> int | None:
    """``value`` as the int it stands for ("2", 2.0 and 2 are 2), None when it stands for none."""
    try:
        number = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None
    return int(number) if number is not None and number.is_integer() else None


def drawn_node_ranks(nnodes: int) -> list[int]:
    """The node ranks of nodes started in order 0, 1, ..., drawn afresh: node rank is not start order."""
    node_ranks = list(range(nnodes))
    random.shuffle(node_ranks)
    return node_ranks


FAILURE_HINTS = (
    ("NODE_RANK", "torchrun gives its workers this node's rank as GROUP_RANK (NODE_RANK is torchrun's own option)"),
    ("connectFullMesh", "two ranks failed to connect while the job started, which a loaded machine can cause: run "
                        "the check again"),
)


def failure_line(error: WorkerError | None, returncode: int) -> str:
    """What the ranks raised, from their error files: the message when every rank that got to
    report raised the same, else the rank the launcher would blame, as ``rank N raised Type:
    message``. torchrun stops the other ranks as soon as one fails, so which ranks get to report
    differs from run to run; the report must not."""
    if error is None:
        return f"torchrun exited with code {returncode}"
    messages = {text[:200] for text in error.failures.values()}
    said = f"{messages.pop()} (the same on every rank that reported)" if len(messages) == 1 else str(error)
    hint = next((fix for pattern, fix in FAILURE_HINTS if pattern in said), "")
    return f"{said}; {hint}" if hint else said


def check_launch_info(launch_info: Callable | str, directory: str | None = None,
                      layouts: tuple[tuple[int, ...], ...] = LAYOUTS) -> Report:
    """Run the learner's ``launch_info`` (the function, or its ``"module:function"`` name,
    importable from ``directory``, default the current one) under torchrun on each of ``layouts``
    (local nodes, static rendezvous, node ranks drawn afresh), in a random order; return the
    report, its lines in the order of ``layouts``. Stops at the first job that fails."""
    directory = os.path.abspath(directory or os.getcwd())
    target = launch_info if isinstance(launch_info, str) else worker_name(launch_info)
    path = os.pathsep.join(p for p in (directory, os.environ.get("PYTHONPATH", "")) if p)
    order = list(layouts)
    random.shuffle(order)
    found: dict[tuple[int, ...], list[str]] = {}
    report = Report()
    for number, node_sizes in enumerate(order, 1):
        # Said without the layout: the order is drawn at random.
        print(f"torchrun job {number} of {len(order)}: its nodes on this machine", flush=True)
        node_ranks = drawn_node_ranks(len(node_sizes))  # the node started i-th gets node rank node_ranks[i]
        job = run_nodes(["-m", "ddp_lib.torchrun", target], nnodes=len(node_sizes),
                        nproc_per_node=[node_sizes[r] for r in node_ranks], static=True, node_order=node_ranks,
                        env={"PYTHONPATH": path})
        if job.returncode != 0:
            report.fail(f"the job failed: {failure_line(job.error, job.returncode)}")
            return report
        found[node_sizes] = find_problems(job.results, node_sizes)
    for node_sizes in layouts:
        where = f"on nodes of {' and '.join(map(str, node_sizes))} processes"
        for problem in found[node_sizes]:
            report.fail(f"{where}: {problem}")
        if not found[node_sizes]:
            report.ok(f"{where}, every rank knows its node, its place on the node and the size of the job")
    return report
