"""One torchrun per host, started together, each waited for within a deadline; how each node
ended, how long it took, and what its ranks left in their folders (the hosts share this machine's
files, as a cluster's nodes share a file system).

    with two_hosts() as (node0, node1):
        job = run_on_hosts([(node0, node_command(HELLO)), (node1, node_command(HELLO))])
        job.results     # every rank's result, in rank order
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ddp_lib.cluster.hosts import Host, kill_everything_in
from ddp_lib.errors import LaunchTimeout, WorkerError, readable
from ddp_lib.launch import _record as rank_files
from ddp_lib.launch._processes import ctrl_c_held
from ddp_lib.launch._torchrun_jobs import ask_for_stacks, timeout_error
from ddp_lib.torchrun import agent_env, clean_env, torchrun_command, with_log_dir

RDZV_PORT = 29400  # torchrun's usual c10d rendezvous port
# Every wait of the rendezvous bounded, and short: a node that never comes fails the join after
# join_timeout; a store that does not answer fails after read_timeout (torch's defaults: 600 and
# 60 s). last_call_timeout only matters when --nnodes is a range.
RDZV_CONF = "join_timeout=20,read_timeout=10,last_call_timeout=1,close_timeout=5"
HELLO = ["-m", "ddp_lib.torchrun", "ddp_lib.cluster.probe:hello"]
# torchrun's agent logs, at INFO (LOGLEVEL=INFO, which run_on_hosts sets), when it starts its
# rendezvous, with the time: "I1205 00:33:39.833000 PID ...] [default] Rendezvous'ing worker group"
# (elastic/agent/server/api.py, _initialize_workers, just before next_rendezvous starts the join
# deadline). A node that fails while it connects to the rendezvous store never logs it.
_JOIN_LOG = re.compile(r"^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) .*\] \[\S+\] Rendezvous'ing worker group", re.M)


def node_command(program: list[str], *, endpoint: str = f"node0:{RDZV_PORT}", nnodes: int = 2,
                 nproc_per_node: int = 1, rdzv_conf: str = RDZV_CONF, run_id: str = "two-hosts",
                 local_addr: str | None = None) -> list[str]:
    """torchrun for one node of a multi-node job: c10d rendezvous at ``endpoint``, every
    rendezvous wait bounded by ``rdzv_conf``; ``local_addr``: the address this node gives for
    itself (``--local-addr``; by default torch uses its host name)."""
    options = (f"--rdzv-conf={rdzv_conf}", "--monitor-interval=0.1") + \
        ((f"--local-addr={local_addr}",) if local_addr else ())
    return torchrun_command(program, nproc_per_node=nproc_per_node, nnodes=nnodes, rdzv_endpoint=endpoint,
                            run_id=run_id, options=options)


def rendezvous_began(stderr: str, started: float) -> float | None:
    """Seconds from ``started`` (a ``time.time()``) to the first rendezvous start logged in a
    torchrun's ``stderr`` (at INFO), or None where none is logged."""
    found = _JOIN_LOG.search(stderr)
    if found is None:
        return None
    month, day, hour, minute, second = found.groups()
    start = datetime.fromtimestamp(started)
    logged = start.replace(month=int(month), day=int(day), hour=int(hour), minute=int(minute), second=0,
                           microsecond=0) + timedelta(seconds=float(second))
    seconds = (logged - start).total_seconds()
    return seconds if 0 <= seconds < 86400 else None  # not across a new year


def outcome_at(log_dir: str, ranks: list, returncode: int | None, started: float) -> float | None:
    """Seconds from ``started`` (a ``time.time()``) to one node's outcome, from its files' times: where
    it succeeded (``returncode`` 0), when its last rank wrote its result; else when the first of its
    error files was written (torchrun's own, or a rank's). None where it left no such file."""
    if returncode == 0:
        files = [Path(r.folder) / rank_files.RESULT_FILE for r in ranks]
        pick = max
    else:
        files = [Path(log_dir) / rank_files.AGENT_ERROR_FILE] + [Path(r.folder) / rank_files.ERROR_FILE for r in ranks]
        pick = min
    times = [f.stat().st_mtime for f in files if f.is_file()]
    return pick(times) - started if times else None


@dataclass
class NodeRun:
    """How one node's torchrun ended."""

    host: str
    returncode: int | None  # None: still running at the deadline (then killed)
    seconds: float
    stderr: str  # torchrun's own log, and its ranks' stderr (--tee=2)
    agent_error: str = ""  # what this torchrun raised itself, "Type: message", from its own error file
    rank_errors: list[str] = field(default_factory=list)  # what its ranks raised, from their error files
    rendezvous_at: float | None = None  # seconds from the job's start to this torchrun's rendezvous start
    # Seconds from the job's start to this node's outcome: its first error file (torchrun's own or a
    # rank's), or, where it succeeded, its last rank's result file; None where it left neither.
    outcome_at: float | None = None

    def errors(self) -> list[str]:
        """What this node's torchrun raised, then what its ranks raised (``Type: message``),
        without repeats."""
        return list(dict.fromkeys(e for e in [self.agent_error, *self.rank_errors] if e))

    def error(self) -> str:
        """The first error, or a sentence saying how the node ended without one. A node still
        running at the deadline is said to be: what it raised then is the stop's own signal."""
        if self.returncode is None:
            return "still running at the deadline"
        return next(iter(self.errors()), f"exit code {self.returncode}")


@dataclass
class HostsJob:
    """The nodes of one job, in the order they were given."""

    nodes: list[NodeRun]
    results: list = field(default_factory=list)  # every finished rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # what the ranks printed on stdout, in rank order
    error: WorkerError | None = None  # the failed rank, blamed as the launcher blames
    # Ranks still running at the deadline, with where each was (as the launcher and torchrun's runner raise it).
    timeout: LaunchTimeout | None = None

    @property
    def ok(self) -> bool:
        return all(node.returncode == 0 for node in self.nodes)

    def summary(self, width: int = 200, rendezvous: bool = False) -> str:
        """One line per node: how it ended, after how many seconds, and its first error (without
        torch's C++ source paths or peer ports). The seconds count from the job's start to the node's
        exit. With ``rendezvous``, they count from the node's rendezvous start, where its rendezvous's
        deadlines count from, to its outcome (:attr:`NodeRun.outcome_at`): its first error, or its
        ranks' results; start-up before it and the exit after it are left out."""
        lines = []
        for node in self.nodes:
            ended = "succeeded" if node.returncode == 0 else f"failed ({readable(node.error())[:width]})"
            what = "its result" if node.returncode == 0 else "its first error"
            if not rendezvous:
                lines.append(f"{node.host}: {ended} after {node.seconds:.0f} s")
            elif node.rendezvous_at is None:
                lines.append(f"{node.host}: {ended} before any rendezvous start was logged")
            elif node.outcome_at is None:
                lines.append(f"{node.host}: {ended}, with no error file; it exited "
                             f"{node.seconds - node.rendezvous_at:.0f} s after its rendezvous began")
            else:
                since = node.outcome_at - node.rendezvous_at
                lines.append(f"{node.host}: {ended}, {what} {since:.0f} s after its rendezvous began")
        return "\n".join(lines)


def run_on_hosts(runs: list[tuple[Host, list[str]]], *, env: dict[str, str] | None = None,
                 timeout: float = 120, others_start_when: Callable[[], bool] | None = None,
                 terminate: tuple[int, float] | None = None) -> HostsJob:
    """Start each ``(host, command)`` at once; wait for all, up to ``timeout`` seconds in all;
    kill what is still running then. ``env``: extra variables for every command (torchrun logs
    at INFO unless ``env`` sets ``LOGLEVEL``). ``others_start_when``: start the first command alone,
    the others once this returns True. ``terminate=(i, s)``: send SIGTERM to the i-th torchrun
    ``s`` seconds after the start (a node that dies)."""
    env = {"LOGLEVEL": "INFO", **(env or {})}
    start, started = time.monotonic(), time.time()
    stacks = None
    with ExitStack() as stack:
        run_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ddp_lib-hosts-"))
        placed = [with_log_dir(cmd, os.path.join(run_dir, f"node{i}")) for i, (_, cmd) in enumerate(runs)]
        errs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in runs]
        procs = []
        try:
            for i, ((host, _), (cmd, log_dir), err) in enumerate(zip(runs, placed, errs)):
                while i == 1 and others_start_when and not others_start_when() and time.monotonic() - start < timeout:
                    time.sleep(0.05)
                os.makedirs(log_dir, exist_ok=True)
                procs.append(subprocess.Popen(host.command(cmd), stdout=subprocess.DEVNULL, stderr=err, text=True,
                                              env=clean_env(agent_env(log_dir, env))))
            ended: dict[int, float] = {}
            while len(ended) < len(procs) and time.monotonic() - start < timeout:
                if terminate and terminate[0] not in ended and time.monotonic() - start >= terminate[1]:
                    procs[terminate[0]].terminate()  # the host's command execs torchrun: this is torchrun
                    terminate = None
                for i, proc in enumerate(procs):
                    if i not in ended and proc.poll() is not None:
                        ended[i] = time.monotonic() - start
                time.sleep(0.05)
            if len(ended) < len(procs):  # the deadline: where each rank still running was, as torchrun's runner asks
                stacks = ask_for_stacks([folder for _, log_dir in placed for folder in rank_files.runs_in(log_dir)])
        finally:
            # At the deadline, on an error or Ctrl-C: nothing may outlive the call. SIGTERM first
            # (torchrun then stops its ranks), then whatever still runs on the hosts is killed.
            with ctrl_c_held():
                for proc in procs:
                    if proc.poll() is None:
                        proc.terminate()
                for proc in procs:
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
                for host, _ in runs:
                    kill_everything_in(host.netns)
                for proc in procs:
                    with contextlib.suppress(subprocess.TimeoutExpired):  # presses are held: never wait forever
                        proc.wait(timeout=10)
        nodes = []
        for i, ((host, _), (_, log_dir), err) in enumerate(zip(runs, placed, errs)):
            err.seek(0)
            code = procs[i].returncode if i in ended else None
            ranks = rank_files.read_ranks([log_dir])
            raised = [r.error for r in ranks if r.error]
            stderr = err.read()
            nodes.append(NodeRun(host.name, code, ended.get(i, timeout), stderr, rank_files.agent_error(log_dir),
                                 raised, rendezvous_began(stderr, started), outcome_at(log_dir, ranks, code, started)))
        # c10d numbers the nodes itself: each rank wrote its global rank in its folder (rank.json).
        run = rank_files.read_run([log_dir for _, log_dir in placed])
        folders = [folder for _, log_dir in placed for folder in rank_files.runs_in(log_dir)]
        hung = timeout_error(timeout, folders, stacks) if stacks is not None else None
    if hung and hung.running:  # stopped at the deadline, not failed: the ranks' silence is the hang's
        return HostsJob(nodes, run.results, run.lines, None, hung)
    return HostsJob(nodes, run.results, run.lines, run.error)
