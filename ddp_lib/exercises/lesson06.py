"""Checker for lesson 06's exercise: ``launch_info(rank, world_size)`` under torchrun, on three node layouts."""

import os
import random
from collections.abc import Callable

from ddp_lib.errors import WorkerError
from ddp_lib.exercises.checking import Report, worker_name
from ddp_lib.torchrun import run_nodes

HINTS = {"world_size": "WORLD_SIZE (all ranks of all nodes)", "local_rank": "LOCAL_RANK (not RANK)",
         "local_world_size": "LOCAL_WORLD_SIZE (processes on this node)",
         "node_rank": "GROUP_RANK (this node's rank; torchrun sets no NODE_RANK for its workers)"}

# Processes on node 0, node 1, ... (by node rank): rank 1 is on node 1 in the first layout and on
# node 0 in the second; the third has three nodes and a world size of 4, not 3.
LAYOUTS = ((1, 2), (2, 1), (1, 1, 2))


def expected_layout(node_sizes: tuple[int, ...]) -> list[dict]:
    """What each rank must answer when node n (by node rank) runs node_sizes[n] processes."""
    return [{"world_size": sum(node_sizes), "local_rank": local_rank, "local_world_size": size, "node_rank": node}
            for node, size in enumerate(node_sizes) for local_rank in range(size)]


def find_problems(results: list, node_sizes: tuple[int, ...]) -> list[str]:
    """One sentence per mistake in the per-rank dicts of a run whose node n runs node_sizes[n] processes."""
    if len(results) != len(expected := expected_layout(node_sizes)):  # a rank that returned nothing
        return [f"{len(results)} of {len(expected)} ranks returned a result; every rank must return a dict"]
    for rank, info in enumerate(results):
        if missing := sorted(set(HINTS) - set(info)) if isinstance(info, dict) else list(HINTS):
            return [f"rank {rank}: the result lacks {', '.join(missing)}"]
    problems = []  # one per mistake
    if typed := [(rank, key, info[key]) for rank, info in enumerate(results) for key in HINTS
                 if type(info[key]) is not int]:  # one line for them all: the same fix
        rank, key, value = typed[0]
        problems.append(f"values must be ints, but rank {rank}'s {key} is {value!r} ({type(value).__name__}): "
                        "environment variables are strings; convert each with int()")
    for key in HINTS:
        wrong = [(rank, info[key], want[key]) for rank, (info, want) in enumerate(zip(results, expected))
                 # "2", 2.0 and 2 stand for 2 (their type is said once above); a bool for no number
                 if (int(info[key]) if str(info[key]).isdigit() else None if isinstance(info[key], bool) else info[key])
                 != want[key]]
        problems += [f"rank {rank}: {key} is {got!r}, expected {want}: read {HINTS[key]}"
                     for rank, got, want in wrong[:1]]
    return problems


FAILURE_HINTS = (("NODE_RANK", "torchrun gives its workers this node's rank as GROUP_RANK (NODE_RANK is torchrun's "
                                "own option)"),
                 ("connectFullMesh", "two ranks failed to connect at start-up (a loaded machine): run the check again"))


def failure_line(error: WorkerError | None, returncode: int) -> str:
    """What the ranks raised: the message if every rank that reported raised the same, else the launcher's blame."""
    if error is None:
        return f"torchrun exited with code {returncode}"
    messages = {text[:200] for text in error.failures.values()}
    said = f"{messages.pop()} (the same on every rank that reported)" if len(messages) == 1 else str(error)
    hint = next((fix for pattern, fix in FAILURE_HINTS if pattern in said), "")
    return f"{said}; {hint}" if hint else said


def unwritten(launch_info: Callable) -> bool:
    """Whether ``launch_info`` is still the lesson's stub: it raises NotImplementedError when called here,
    in this process. Any other outcome (a result, or a KeyError since this process has no torchrun
    variables) leaves the verdict to the torchrun jobs. Saves the jobs' start, a few seconds, on a stub."""
    try:
        launch_info(0, 1)
    except NotImplementedError:
        return True
    except Exception:  # noqa: BLE001 - only the stub's own error is judged here
        return False
    return False


def check_launch_info(launch_info: Callable | str, directory: str | None = None,
                      layouts: tuple[tuple[int, ...], ...] = LAYOUTS) -> Report:
    """A report on ``launch_info`` (or ``"module:function"`` in ``directory``) under torchrun on each layout."""
    report = Report()
    if callable(launch_info) and unwritten(launch_info):
        report.fail("launch_info is not written yet: it raises NotImplementedError. Replace the raise with your "
                    "code; the check then starts its torchrun jobs")
        return report
    target = launch_info if isinstance(launch_info, str) else worker_name(launch_info)
    path = os.pathsep.join(filter(None, (os.path.abspath(directory or os.getcwd()), os.environ.get("PYTHONPATH"))))
    for number, node_sizes in enumerate(layouts, 1):
        print(f"torchrun job {number} of {len(layouts)}: its nodes on this machine", flush=True)
        # The node started i-th gets node rank node_ranks[i]: node rank is not start order.
        node_ranks = random.sample(range(len(node_sizes)), len(node_sizes))
        job = run_nodes(["-m", "ddp_lib.torchrun", target], nnodes=len(node_sizes),
                        nproc_per_node=[node_sizes[r] for r in node_ranks], static=True, node_order=node_ranks,
                        env={"PYTHONPATH": path})
        if job.returncode != 0:
            report.fail(f"the job failed: {failure_line(job.error, job.returncode)}")
            return report
        where = f"on nodes of {' and '.join(map(str, node_sizes))} processes"
        for problem in (problems := find_problems(job.results, node_sizes)):
            report.fail(f"{where}: {problem}")
        if not problems:
            report.ok(f"{where}, every rank knows its node, its place on the node and the size of the job")
    return report
