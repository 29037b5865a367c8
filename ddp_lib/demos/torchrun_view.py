"""Lesson 02: ``launcher_view`` under torchrun. Run ``torchrun --nproc-per-node 2 -m
ddp_lib.demos.torchrun_view``: each rank prints what it finds as one JSON line, with which process
listens on ``MASTER_PORT``: this rank, or its parent, torchrun's agent. The ranks do not import
torch, so the job costs one import of torch, in torchrun's own process.

``views_of_ranks`` reads the same from outside, for a torchrun job already running (Linux's /proc):
the lesson takes it from the job it runs anyway, and starts no second one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ddp_lib.demos.launcher_env import LAUNCHER_VARS, launcher_env
from ddp_lib.ports import listens_on


def main() -> None:
    """Print this rank's launcher variables as
    ``{"rank": r, "view": {"env": {...}, "master_port": p, "store": {...}, "own session": b}}``, its
    address and port as "set" in ``env`` (the port's number in ``master_port``), whether this rank or
    its parent listens on ``MASTER_PORT``, and whether this rank leads a session of its own."""
    rank = int(os.environ["RANK"])
    port = int(os.environ["MASTER_PORT"])
    view = {"env": launcher_env(), "master_port": port,
            "store": {"agent": listens_on(os.getppid(), port), "rank": listens_on(os.getpid(), port)},
            "own session": os.getsid(0) == os.getpid()}  # torchrun starts each rank with start_new_session
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # they change from run to run
        if view["env"][name] is not None:
            view["env"][name] = "set"
    # One write of the whole line: the ranks share torchrun's stdout, and a print's text and its newline
    # can go out as two writes (unbuffered output), between which the other rank's line lands.
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps({"rank": rank, "view": view}) + "\n").encode())


def _view(env: dict, agent_pid: int, rank_pid: int) -> dict:
    view = {"env": {name: env.get(name) for name in LAUNCHER_VARS}}
    port = int(env["MASTER_PORT"])
    view["master_port"] = port  # the number, for a check; the table shows "set"
    view["store"] = {"agent": listens_on(agent_pid, port), "rank": listens_on(rank_pid, port)}
    view["own session"] = os.getsid(rank_pid) == rank_pid  # the rank leads a session, and a process group
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # they change from run to run
        if view["env"][name] is not None:
            view["env"][name] = "set"
    return view


def _environ(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    pairs = (item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    return dict(pairs)


def views_of_ranks(agent_pid: int, nprocs: int, give_up: float = 120.0) -> list[dict]:
    """What each rank of a running torchrun job finds, as ``main`` prints it, read from outside.

    ``agent_pid`` is torchrun's own process, the ranks' parent. Each rank's environment is read
    from ``/proc/<pid>/environ`` (what the agent gave it when it started), and which process
    listens on ``MASTER_PORT`` while the rank runs. Call it right after starting the job: it
    waits until ``nprocs`` ranks have started, and raises if the agent ends or ``give_up`` s pass
    first. Linux only; the views come in rank order."""
    from ddp_lib.demos.hung_ranks import rank_pids  # here: the ranks, which run main(), never import it

    found: dict[int, dict] = {}
    deadline = time.monotonic() + give_up
    while len(found) < nprocs:
        for rank, pid in rank_pids(agent_pid).items():  # after exec: the agent's environment for it
            env = _environ(pid)
            if env and rank not in found:
                found[rank] = _view(env, agent_pid, pid)
        if len(found) < nprocs:
            if not os.path.exists(f"/proc/{agent_pid}") or time.monotonic() > deadline:
                raise RuntimeError(f"saw {len(found)} of {nprocs} ranks of torchrun's agent {agent_pid}")
            time.sleep(0.02)
    return [found[rank] for rank in sorted(found)]


def run_holding_port(script: str | Path, nprocs: int = 2, hold: int = 29500,
                     while_starting: Callable[[], object] | None = None,
                     timeout: float = 300) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run ``torchrun --nproc-per-node nprocs script`` (as ``python -m torch.distributed.run``, the same
    program) while this process holds port ``hold``, as another job might; a port some other process
    holds already serves as well. Returns ``(run, views)``: the finished job, and what each rank found
    (:func:`views_of_ranks`), read while it ran. ``while_starting``, if given, is called once the job
    has started (to show a picture meanwhile). A job still running after ``timeout`` s is stopped."""
    from ddp_lib.torchrun import stop_torchruns  # here: the ranks, which run main(), never import it

    try:
        held = socket.create_server(("127.0.0.1", hold))
    except OSError:  # another process holds it already
        held = None
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nprocs), str(script)]
    try:
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if while_starting is not None:
                while_starting()
            views = views_of_ranks(job.pid, nprocs=nprocs)
            stdout, stderr = job.communicate(timeout=timeout)
        except BaseException:
            stop_torchruns([job])
            raise
    finally:
        if held is not None:
            held.close()
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr), views


def views_from(printed: str) -> list[dict]:
    """The views that ``main`` printed, one per rank, in rank order."""
    records = [json.loads(line) for line in printed.splitlines() if line.startswith("{")]
    return [record["view"] for record in sorted(records, key=lambda record: record["rank"])]


if __name__ == "__main__":
    main()
