"""Running torchrun from Python (a notebook, a test) and reading back what each rank returned:
start every torchrun of a job, follow rank 0's output, stop everything at the deadline or on a
failure, and read the ranks' records (:mod:`ddp_lib.launch._record`). The public names are
:mod:`ddp_lib.torchrun`'s."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError
from ddp_lib.launch import _record as rank_files
from ddp_lib.launch import _stacks
from ddp_lib.launch._checks import check_timeout
from ddp_lib.launch._output import FollowedFiles
from ddp_lib.launch._processes import ctrl_c_held, descendants, kill_all, stop_to_the_end
from ddp_lib.launch._torchrun_command import agent_env, clean_env, command_text, node_commands, with_log_dir


@dataclass
class TorchrunJob:
    """What came back from one or more torchrun processes, read from their ranks' folders."""

    returncode: int
    results: list  # each finished rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # what the ranks printed on stdout (rank 0's progress)
    stderr: str = ""  # torchrun's own log (and the ranks' stderr, --tee=2): timestamps, PIDs; not for printing
    error: WorkerError | None = None  # the failed rank, blamed as the launcher blames; None if none failed
    agent_error: str = ""  # what a torchrun itself raised, "Type: message" (a rendezvous timeout); "" if none


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a torchrun and every process below it. Its ranks run in sessions of their own
    (``start_new_session=True``, ``subprocess_handler.py``): killing torchrun alone orphans them."""
    below = descendants(proc.pid)
    proc.kill()
    kill_all(below)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass  # outlived SIGKILL (uninterruptible sleep): nothing more can be done, and Ctrl-C may be held


def _stop(procs: list[subprocess.Popen], grace: float = 10) -> None:
    """Stop every torchrun still running: SIGTERM, which torchrun handles by stopping its ranks
    (``SignalException``, ``elastic/multiprocessing/api.py``); whatever still runs ``grace``
    seconds later is killed, with its ranks. Ctrl-C pressed meanwhile waits until then."""
    with ctrl_c_held():
        running = [proc for proc in procs if proc.poll() is None]
        for proc in running:
            proc.terminate()
        end = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_tree(proc)


def stop_torchruns(procs: list[subprocess.Popen]) -> None:
    """Stop these torchrun processes and their ranks (:func:`_stop`), whatever Ctrl-C does: run again
    if a press lands before it holds presses back; KeyboardInterrupt once all is stopped if one was."""
    if stop_to_the_end(lambda: _stop(procs)):
        raise KeyboardInterrupt




class _PastDeadline(Exception):
    """The deadline passed; ``stacks``: what each rank still running wrote when asked (:func:`ask_for_stacks`)."""

    def __init__(self, stacks: dict[Path, list[dict]]):
        self.stacks = stacks


def ask_for_stacks(runs: list[Path]) -> dict[Path, list[dict]]:
    """Ask every rank of these run folders that has neither finished nor failed for its Python
    stacks, which it writes as data in its folder (:mod:`ddp_lib.launch._stacks`): ``{rank folder:
    threads}`` for those that answered. The same request on one machine and on several hosts."""
    ranks = rank_files.read_ranks(runs) if runs else []
    return _stacks.ask({r.folder: rank_files.stack_files(r.folder) for r in ranks if not r.finished and not r.error})


def timeout_error(timeout: float, runs: list[Path], stacks: dict[Path, list[dict]]) -> LaunchTimeout:
    """The ranks of these run folders that had neither finished nor failed at the deadline, with
    the stacks each wrote when asked (:func:`ask_for_stacks`)."""
    ranks = rank_files.read_ranks(runs) if runs else []
    running = [r for r in ranks if not r.finished and not r.error]
    frames = {r.rank: stacks[r.folder] for r in running if r.folder in stacks}
    return LaunchTimeout(timeout, [r.rank for r in running], {r.rank: (r.stdout, r.stderr) for r in ranks},
                         {rank: _stacks.as_text(threads) for rank, threads in frames.items()}, frames)


def _check_run_input(cmds: list[object], timeout: object) -> float:
    """Refuse, in one line, a command that is not a list of strings and a timeout that is no number
    of seconds above 0 (before anything starts); return the timeout (inf for None)."""
    for cmd in cmds:
        if not isinstance(cmd, (list, tuple)) or not all(isinstance(arg, str) for arg in cmd):
            raise LaunchInputError(f"a command must be a list of strings, as torchrun_command returns, "
                                   f"got {cmd!r}"[:300])
    checked = check_timeout(timeout)
    return float("inf") if checked is None else checked


def _run_all(cmds: list[list[str]], log_dirs: list[str], before: list[set[Path]], timeout: float,
             env: dict[str, str] | None, show: bool, labels: list[str],
             stop_on_failure: bool = False) -> list[tuple[int, str]]:
    """Start every command at once, each with its ranks' files under its log folder; return the exit
    code and stderr of each. With ``show``, a line per command as it starts, then what the ranks
    print on stdout, as it comes. ``stop_on_failure``: once one command fails, stop the others.
    Nothing outlives the call."""
    procs, errs, readers = [], [], []

    def rank_stdouts() -> list[Path]:  # this call's runs only (``before``: what a reused --log-dir held)
        return sorted(p for run in _runs_since(log_dirs, before) for p in run.glob("attempt_*/*/stdout.log"))

    follow = FollowedFiles(rank_stdouts) if show else None

    def read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    try:
        for label, cmd, log_dir in zip(labels, cmds, log_dirs):
            if show:
                print(f"starting{label}: {command_text(cmd)}", flush=True)
            # torchrun's stdout holds only what --tee copies there: the ranks' files have it all.
            with ctrl_c_held():  # a torchrun started is one _stop will see: torchrun does not watch its parent
                procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                              bufsize=1, env=clean_env(agent_env(log_dir, env))))
            proc = procs[-1]
            errs.append([])
            readers.append(threading.Thread(target=read, args=(proc.stderr, errs[-1]), daemon=True))
            readers[-1].start()
        deadline, killing_at = time.monotonic() + timeout, None
        while None in [proc.poll() for proc in procs]:  # a list: every process polled, each returncode current
            if stop_on_failure and killing_at is None and any(proc.returncode not in (None, 0) for proc in procs):
                # A node whose peer failed waits for it at the exit barrier, 300 s: stop it as a
                # scheduler would, SIGTERM then SIGKILL (inside the barrier's C++ wait, torchrun
                # only handles SIGTERM once the wait ends).
                killing_at = time.monotonic() + 5
                for proc in procs:
                    if proc.poll() is None:
                        proc.terminate()
            if killing_at is not None and time.monotonic() > killing_at:
                for proc in procs:
                    if proc.poll() is None:
                        _kill_tree(proc)
            if time.monotonic() > deadline:
                raise _PastDeadline(ask_for_stacks(_runs_since(log_dirs, before)))
            if follow:
                follow.poll()
            time.sleep(0.05)
        for reader in readers:
            reader.join()
        if follow:
            follow.poll(final=True)
    finally:
        if follow:
            follow.close()
        stop_torchruns(procs)  # at the deadline, on an error or Ctrl-C: nothing outlives the call
    return [(proc.returncode, "".join(err)) for proc, err in zip(procs, errs)]


def read_job(returncode: int, runs: list[Path], log_dirs: list[str], stderr: str = "") -> TorchrunJob:
    """The job whose torchruns made these run folders and had these ``--log-dir`` folders. A failure
    only when the job failed: ranks of a program that writes no result still succeed."""
    run = rank_files.read_run(runs)
    agent = next((text for text in map(rank_files.agent_error, log_dirs) if text), "")
    return TorchrunJob(returncode, run.results, run.lines, stderr, run.error if returncode != 0 else None, agent)


def _prepare(cmds: list[list[str]], tmp: str, name: str) -> tuple[list[list[str]], list[str], list[set[Path]]]:
    """Each command with its log folder (the command's own, else one in ``tmp``), the folders, and
    the run folders already in each: a ``--log-dir`` is reused by every run given it, and only this
    call's runs are read. An earlier run's torchrun error file is removed."""
    placed = [with_log_dir(cmd, os.path.join(tmp, f"{name}{i}")) for i, cmd in enumerate(cmds)]
    log_dirs = [log_dir for _, log_dir in placed]
    for log_dir in log_dirs:
        os.makedirs(log_dir, exist_ok=True)
        Path(log_dir, rank_files.AGENT_ERROR_FILE).unlink(missing_ok=True)
    return [cmd for cmd, _ in placed], log_dirs, [set(rank_files.runs_in(d)) for d in log_dirs]


def _new_runs(log_dir: str, before: set[Path]) -> list[Path]:
    return [run for run in rank_files.runs_in(log_dir) if run not in before]


def _runs_since(log_dirs: list[str], before: list[set[Path]]) -> list[Path]:
    """The run folders made since ``before`` in each log folder, each once: nodes given one
    ``--log-dir`` share it."""
    return [run for log_dir, old in dict(zip(log_dirs, before)).items() for run in _new_runs(log_dir, old)]


def run_torchrun(cmd: list[str], timeout: float | None = 120, env: dict[str, str] | None = None,
                 show: bool = False) -> TorchrunJob:
    """Run one torchrun command to the end; return its results and output, read from its ranks'
    folders (under the command's ``--log-dir``, else a temporary one, removed afterwards). ``show``:
    print the command as it starts and rank 0's lines as they come. Raises LaunchInputError before
    starting for a command that is no list of strings or a bad timeout; LaunchTimeout, with each
    rank's stack, at the deadline (None: no deadline), every process stopped."""
    return run_together([cmd], timeout, env, show)[0]


def run_together(cmds: list[list[str]], timeout: float = 120, env: dict[str, str] | None = None,
                 show: bool = False) -> list[TorchrunJob]:
    """Start every command at once (separate jobs side by side on this machine); wait for all.
    ``show``: print each command as it starts, and rank 0's lines as they come."""
    timeout = _check_run_input(cmds, timeout)
    labels = [f" job {i + 1}" for i in range(len(cmds))] if len(cmds) > 1 else [""]
    with tempfile.TemporaryDirectory(prefix="ddp_lib-torchrun-") as tmp:
        placed, log_dirs, before = _prepare(cmds, tmp, "job")
        try:
            done = _run_all(placed, log_dirs, before, timeout, env, show, labels)
        except _PastDeadline as past:
            raise timeout_error(timeout, _runs_since(log_dirs, before), past.stacks) from None
        return [read_job(code, _new_runs(log_dir, old), [log_dir], err)
                for (code, err), log_dir, old in zip(done, log_dirs, before)]


def run_nodes(program: list[str], *, nnodes: int = 2, nproc_per_node: int | list[int] = 1, max_restarts: int = 0,
              static: bool = False, node_order: list[int] | None = None, timeout: float = 120,
              env: dict[str, str] | None = None, options: tuple[str, ...] = (),
              node_options: list[tuple[str, ...]] | None = None, show: bool = False) -> TorchrunJob:
    """Start ``nnodes`` torchrun processes on this machine, as if each were a node, meeting on
    127.0.0.1 (a free port); wait for all (once one fails, stop the others); read every rank's
    folder, in rank order.
    ``nproc_per_node``: one count for every node, or one per node. c10d numbers the nodes itself;
    ``static=True`` gives node i ``--node-rank=node_order[i]`` (default i) instead. ``options``: more
    torchrun options for every node; ``node_options[i]``: for node i only. ``show``: print
    each node's command as it starts, and rank 0's lines as they come."""
    timeout = _check_run_input([list(program)], timeout)
    cmds = node_commands(program, nnodes=nnodes, nproc_per_node=nproc_per_node, max_restarts=max_restarts,
                         static=static, node_order=node_order, options=options, node_options=node_options)
    with tempfile.TemporaryDirectory(prefix="ddp_lib-torchrun-") as tmp:
        placed, log_dirs, before = _prepare(cmds, tmp, "node")
        try:
            done = _run_all(placed, log_dirs, before, timeout, env, show,
                            [f" torchrun {i + 1} of {nnodes}" for i in range(nnodes)], stop_on_failure=True)
        except _PastDeadline as past:
            raise timeout_error(timeout, _runs_since(log_dirs, before), past.stacks) from None
        # Each rank wrote its global rank (rank.json): the nodes' folders may come in any order.
        runs = _runs_since(log_dirs, before)
        return read_job(job_exit_code([code for code, _ in done]), runs, log_dirs, "\n".join(err for _, err in done))


def job_exit_code(codes: list[int]) -> int:
    """One exit code for the torchruns of a job: the first that failed with a code of its own (a
    node stopped by SIGTERM after its peer failed reports -15, the signal, not the cause), else the
    lowest (a signal), else 0."""
    return next((code for code in codes if code > 0), min(codes, default=0))
