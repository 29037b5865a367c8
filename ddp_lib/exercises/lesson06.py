"""Checker for lesson 06's exercise: ``launch_info(rank, world_size)`` under torchrun, on three node layouts."""

import os
import random
import re
from collections.abc import Callable
from pathlib import Path

from ddp_lib.errors import WorkerError
from ddp_lib.exercises.checking import Report, worker_name
from ddp_lib.launch._record import NO_FILES
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
    if said.startswith(NO_FILES) and (tails := [err.strip().splitlines()[-1]
                                                for _, err in error.outputs.values() if err.strip()]):
        said += f"; a rank's stderr ends: {tails[0]}"  # e.g. an ImportError before the worker ran
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


# Exercise 3: a restart on two nodes, read from the files its cell leaves in ``folder``.
_START = re.compile(r"attempt (\d+): starting at epoch (\d+)")


def _attempt_folders(log_dir: Path) -> list[str]:
    """The ``attempt_<N>`` folders torchrun left under ``log_dir`` (any run folder), sorted."""
    return sorted({p.name for p in log_dir.glob("*/attempt_*") if p.is_dir()})


def check_two_node_restart(folder: str | Path = "my_work") -> Report:
    """Exercise 3: read ``ex3_node0.log``/``ex3_node1.log`` and the two ``--log-dir`` folders in ``folder``.
    Passes when rank 0's log shows attempt 0 from epoch 0, then a restart that resumed at epoch 2 and
    trained to epoch 4; then says which node spent a restart (both outcomes are right)."""
    folder, report = Path(folder), Report()
    logs = [folder / f"ex3_node{n}.log" for n in (0, 1)]
    if not all(log.is_file() for log in logs):
        others = sorted(p.name for p in folder.glob("ex3_node*.log") if p not in logs)
        if others:
            report.fail(f"found {', '.join(others)}, not ex3_node0.log and ex3_node1.log: run the loop in the "
                        "exercise's `%%bash` cell; in a `!` line a plain `$n` takes a Python variable `n` if one "
                        "exists, and the shell's is written `$$n`")
        else:
            report.fail(f"{folder / 'ex3_node0.log'} is missing: run exercise 3's cell first")
        return report
    texts = [log.read_text(errors="replace") for log in logs]
    printed = [n for n, text in enumerate(texts) if _START.search(text)]
    if not printed:
        report.fail("neither log has an `attempt N: starting at epoch E` line: no rank 0 started. "
                    "Read the logs' last lines; is the port free, and was the checkpoint deleted?")
        return report
    n = printed[0]
    text = texts[n]
    starts = [(int(a), int(e)) for a, e in _START.findall(text)]
    if starts[0][1] != 0:
        report.fail(f"the first attempt started at epoch {starts[0][1]}, not 0: "
                    "delete my_work/checkpoint.pt before the run (`!rm -f my_work/checkpoint.pt`)")
        return report
    if len(starts) == 1:
        if "epoch 4: last loss" in text:
            report.fail("rank 1 never failed: set FAIL_IN_EPOCH=2 before `torchrun`, the epoch in which rank 1 fails")
        else:
            report.fail("the job ended without a restart: give `--max-restarts 1`, and set "
                        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 before `torchrun`, as the restart cell's command does")
        return report
    resumed = starts[1][1]
    after = text[text.rindex("starting at epoch"):]
    if resumed != 2 or "epoch 4: last loss" not in after:
        report.fail(f"the restart started at epoch {resumed} and {'reached' if 'epoch 4' in after else 'did not reach'}"
                    " epoch 4: expected a resume at epoch 2, trained to epoch 4. Read the log's end")
        return report
    same = starts[1][0] == starts[0][0]  # outcome B: this node's agent joined the other node's new round
    why = (f" (attempt {starts[1][0]} again: this node's agent spent no restart; the other node's restart "
           "started the new round, outcome B)" if same else "")
    report.ok(f"node 0's rank 0 (ex3_node{n}.log): attempt {starts[0][0]} from epoch 0, "
              f"then attempt {starts[1][0]} resumed at epoch 2 and trained to epoch 4{why}")
    spent = []
    for m in (0, 1):
        attempts = _attempt_folders(folder / f"ex3_node{m}")
        if not attempts:
            report.fail(f"{folder / f'ex3_node{m}'} holds no attempt folder: give"
                        " `--log-dir my_work/ex3_node$n`, as the exercise's `%%bash` cell does")
            return report
        if "attempt_1" in attempts:
            spent.append(m)
    which = " and ".join(f"the torchrun started with n={m}" for m in spent) or "neither torchrun"
    report.ok(f"{which} spent a restart (an attempt_1 folder); "
              f"{'both nodes counted a failure' if len(spent) == 2 else 'the other restarted for the new round'}")
    return report
