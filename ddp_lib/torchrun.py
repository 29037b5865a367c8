"""Running a worker under real ``torchrun`` from Python (a notebook, a test) and reading back
what each rank returned.

    cmd = torchrun_command(["-m", "ddp_lib", "run", "train", "--json"], nproc_per_node=2)
    job = run_torchrun(cmd)          # job.results: one result per rank, in rank order

Each torchrun runs with ``--log-dir`` (a temporary folder unless the command names one) and
``--redirects=3``: every rank's stdout, stderr, error and result land in a folder of its own, read
back by :mod:`ddp_lib.rank_files` (only the run folders this call's torchruns made). ``--tee=2``
also copies the ranks' stderr to torchrun's, as a person at a terminal would see it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pkgutil
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lib import rank_files
from ddp_lib._child import STACK_DUMP_SIGNAL, write_stacks_on_signal
from ddp_lib._output import FollowedFiles
from ddp_lib._processes import OwnProcess, children, ctrl_c_held, descendants, kill_all, stop_to_the_end
from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError
from ddp_lib.launch_checks import LAUNCHER_VARS, TORCHRUN_VARS, check_timeout

# Variables a launcher sets for its ranks: a torchrun started from inside a rank must not
# inherit them, or its workers would join the outer job's store.
_LAUNCH_VARS = (*TORCHRUN_VARS, *LAUNCHER_VARS, "DDP_LIB_BACKEND", "TORCHELASTIC_ERROR_FILE")
_TMP = tempfile.gettempdir()
# torchrun's failure summary (ChildFailedError) between its two lines of "=", and what changes from
# run to run in it: times, host names, process ids, paths.
_SUMMARY = re.compile(r"^=+\n.*?^=+$", re.MULTILINE | re.DOTALL)
_RUN_SPECIFIC = ((re.compile(r"(time\s+: ).*"), r"\g<1>TIME"), (re.compile(r"(host\s+: ).*"), r"\g<1>HOST"),
                 (re.compile(r"\(pid: \d+\)"), "(pid: PID)"), (re.compile(r"by PID \d+"), "by PID PID"),
                 (re.compile(r'File "[^"]*/(site-packages|ddp_lib)/'), r'File ".../\1/'),
                 (re.compile(r"(error_file: )\S*/(attempt_\d+/\d+/error\.json)"), r"\1LOG_DIR/.../\2"))


@dataclass
class TorchrunJob:
    """What came back from one or more torchrun processes, read from their ranks' folders."""

    returncode: int
    results: list  # each finished rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # what the ranks printed on stdout (rank 0's progress)
    stderr: str = ""  # torchrun's own log (and the ranks' stderr, --tee=2): timestamps, PIDs; not for printing
    error: WorkerError | None = None  # the failed rank, blamed as the launcher blames; None if none failed
    agent_error: str = ""  # what a torchrun itself raised, "Type: message" (a rendezvous timeout); "" if none


def torchrun_command(program: list[str], *, nproc_per_node: int = 2, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, max_restarts: int = 0, run_id: str = "ddp-lib",
                     node_rank: int | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """The argument list of ``python -m torch.distributed.run`` (torchrun) for ``program``
    (e.g. ``["-m", "ddp_lib", "run", "train"]``). Without ``rdzv_endpoint``, one node
    with ``--standalone`` (a c10d rendezvous on a free local port). With ``node_rank``, the static
    rendezvous: this node's rank is given, and node 0's agent hosts the store at ``rdzv_endpoint``
    (``--master-addr``/``--master-port``). ``options``: more torchrun options, e.g.
    ``("--rdzv-conf=join_timeout=20",)``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}",
           f"--max-restarts={max_restarts}"]
    if rdzv_endpoint is None:
        cmd.append("--standalone")
    elif node_rank is not None:
        addr, port = rdzv_endpoint.rsplit(":", 1)
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", f"--master-addr={addr}", f"--master-port={port}"]
    else:
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={run_id}"]
    return cmd + list(options) + program


# torchrun's options that take no value (check_env in torch/distributed/run.py): every other option
# is followed by its value, as "--name=VALUE" or "--name VALUE".
_FLAGS = {"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
          "--virtual-local-rank", "--virtual_local_rank", "-h", "--help"}
_SHORT = {"redirects": "-r", "tee": "-t"}


def _torchrun_options(cmd: list[str]) -> list[tuple[str, str | None]]:
    """``(option, value)`` for each torchrun option of ``cmd`` (``python -m torch.distributed.run ...``),
    up to its program; the value None for a flag."""
    found, i = [], 3
    while i < len(cmd) and cmd[i].startswith("-"):
        arg = cmd[i]
        if arg in _FLAGS:
            found.append((arg, None))
            i += 1
        elif "=" in arg:
            found.append(tuple(arg.split("=", 1)))
            i += 1
        else:
            found.append((arg, cmd[i + 1] if i + 1 < len(cmd) else ""))
            i += 2
    return found


def _option(cmd: list[str], name: str) -> str | None:
    """The value of torchrun option ``name`` in ``cmd``, written ``--name=VALUE`` or ``--name VALUE``
    (or with underscores, or as ``-r``/``-t``), or None."""
    spellings = {f"--{name}", f"--{name.replace('-', '_')}", _SHORT.get(name)}
    return next((value for option, value in _torchrun_options(cmd) if option in spellings), None)


def with_log_dir(cmd: list[str], log_dir: str) -> tuple[list[str], str]:
    """``cmd`` (``python -m torch.distributed.run ...``) with each rank's files in a folder of its own:
    ``--log-dir=log_dir`` unless it names one, ``--redirects=3`` unless it sets ``--redirects`` or
    ``--tee`` (torchrun adds the tee'd streams to the redirected ones, ``DefaultLogsSpecs.reify``),
    ``--tee=2`` unless it sets it; the options go before the program. And the log folder used."""
    wanted = {"log-dir": _option(cmd, "log-dir") is None, "tee": _option(cmd, "tee") is None}
    wanted["redirects"] = wanted["tee"] and _option(cmd, "redirects") is None
    added = [f"--{name}={value}" for name, value in (("log-dir", log_dir), ("redirects", "3"), ("tee", "2"))
             if wanted[name]]
    return cmd[:3] + added + cmd[3:], _option(cmd, "log-dir") or log_dir


def agent_env(log_dir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """``extra`` plus ``TORCHELASTIC_ERROR_FILE`` for a torchrun with this ``--log-dir``: its main is
    wrapped in ``@record`` (``torch/distributed/run.py``), so what it raises itself is written there
    (its ranks are given files of their own)."""
    return {**(extra or {}), "TORCHELASTIC_ERROR_FILE": os.path.join(log_dir, rank_files.AGENT_ERROR_FILE)}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher's rank variables or colour, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    # Its output is read, not shown on a terminal: no colour codes in tracebacks, although a
    # Jupyter kernel sets FORCE_COLOR (Python 3.13 reads PYTHON_COLORS first; other tools NO_COLOR).
    env.update({"PYTHON_COLORS": "0", "NO_COLOR": "1"})
    env.update(extra or {})
    return env


def command_text(cmd: list[str]) -> str:
    """``cmd`` as a learner would type it: ``torchrun`` for ``python -m torch.distributed.run``,
    ``PORT`` for a port and ``DIR`` for a temporary directory (both change from run to run)."""
    args = cmd[3:] if cmd[1:3] == ["-m", "torch.distributed.run"] else cmd
    shown = []
    for before, arg in zip(["", *args], args):
        if before in ("--master-port", "--master_port") and arg.isdigit():
            arg = "PORT"
        elif before in ("--rdzv-endpoint", "--rdzv_endpoint"):
            arg = re.sub(r":\d+$", ":PORT", arg)
        else:
            arg = re.sub(r"^(--master[-_]port=|--rdzv[-_]endpoint=[^:]+:)\d+$", r"\g<1>PORT", arg)
        name, equals, value = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
        if value.startswith(_TMP):
            value = "DIR"
        shown.append(f"{name}{equals}{value}")
    return " ".join(["torchrun"] + shown if args is not cmd else shown)


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


STACK_DUMP_WAIT_S = 0.5  # for ranks still running at the deadline to write their stacks


class _PastDeadline(Exception):
    """The deadline passed; ``offsets``: where each rank's stderr.log ended before it was asked for its stack."""

    def __init__(self, offsets: dict[Path, int]):
        self.offsets = offsets


def _ask_for_stacks(procs: list[subprocess.Popen], rank_stderrs: list[Path]) -> dict[Path, int]:
    """Ask every rank of these torchruns (each torchrun's children) to write its Python stack to its
    stderr: ddp_lib's rank side has faulthandler write it on STACK_DUMP_SIGNAL; another program ends
    on it, being stopped anyway. Returns where each stderr.log ended before."""
    offsets = {}
    for path in rank_stderrs:
        with contextlib.suppress(OSError):
            offsets[path] = path.stat().st_size
    if STACK_DUMP_SIGNAL is None:
        return offsets
    for proc in procs:
        for pid in children(proc.pid):
            OwnProcess(pid).signal(STACK_DUMP_SIGNAL)
    time.sleep(STACK_DUMP_WAIT_S)
    return offsets


def _timeout_error(timeout: float, runs: list[Path], offsets: dict[Path, int]) -> LaunchTimeout:
    """The ranks of these run folders that had neither finished nor failed at the deadline, with
    what each wrote to its stderr after it was asked for its stack."""
    ranks = rank_files.read_ranks(runs) if runs else []
    running = [r for r in ranks if not r.finished and not r.error]
    stacks = {}
    for r in running:
        path = r.folder / "stderr.log"
        with contextlib.suppress(OSError):
            stacks[r.rank] = path.read_bytes()[offsets.get(path, 0):].decode("utf-8", errors="replace")
    return LaunchTimeout(timeout, [r.rank for r in running], {r.rank: (r.stdout, r.stderr) for r in ranks}, stacks)


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
                stderrs = [p for run in _runs_since(log_dirs, before) for p in run.glob("attempt_*/*/stderr.log")]
                raise _PastDeadline(_ask_for_stacks(procs, stderrs))
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
            raise _timeout_error(timeout, _runs_since(log_dirs, before), past.offsets) from None
        return [read_job(code, _new_runs(log_dir, old), [log_dir], err)
                for (code, err), log_dir, old in zip(done, log_dirs, before)]


def _free_port() -> int:
    """A local TCP port that was free a moment ago (the OS picks it). ``process_group.free_port``
    does the same, but importing that module imports torch, which neither the notebook that runs
    torchrun nor its ranks otherwise need."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_commands(program: list[str], *, nnodes: int = 2, nproc_per_node: int | list[int] = 1, max_restarts: int = 0,
                  static: bool = False, node_order: list[int] | None = None, options: tuple[str, ...] = (),
                  node_options: list[tuple[str, ...]] | None = None) -> list[list[str]]:
    """The torchrun command of each of ``nnodes`` "nodes" on this machine, meeting on 127.0.0.1 at a
    port free a moment ago (the arguments as :func:`run_nodes` takes them). Given one ``--log-dir``
    in ``options``, the nodes' commands can run in :func:`run_together` beside other jobs, and each
    node's job then reads back the ranks of every node."""
    counts = [nproc_per_node] * nnodes if isinstance(nproc_per_node, int) else list(nproc_per_node)
    if len(counts) != nnodes:
        raise ValueError(f"nproc_per_node has {len(counts)} counts for {nnodes} nodes; give one per node or one int")
    order = node_order or list(range(nnodes))
    endpoint = f"127.0.0.1:{_free_port()}"
    return [torchrun_command(program, nproc_per_node=count, nnodes=nnodes, rdzv_endpoint=endpoint,
                             max_restarts=max_restarts, node_rank=order[i] if static else None,
                             options=options + (node_options[i] if node_options else ()))
            for i, count in enumerate(counts)]


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
            raise _timeout_error(timeout, _runs_since(log_dirs, before), past.offsets) from None
        # Each rank wrote its global rank (rank.json): the nodes' folders may come in any order.
        runs = _runs_since(log_dirs, before)
        return read_job(job_exit_code([code for code, _ in done]), runs, log_dirs, "\n".join(err for _, err in done))


def job_exit_code(codes: list[int]) -> int:
    """One exit code for the torchruns of a job: the first that failed with a code of its own (a
    node stopped by SIGTERM after its peer failed reports -15, the signal, not the cause), else the
    lowest (a signal), else 0."""
    return next((code for code in codes if code > 0), min(codes, default=0))


def failure_summary(stderr: str) -> str:
    """torchrun's failure summary (the ``ChildFailedError`` box) from its stderr, with times,
    host names, process ids and paths replaced by placeholders; "" if there is none."""
    found = _SUMMARY.findall(stderr)
    if not found:
        return ""
    text = found[-1]
    for pattern, replacement in _RUN_SPECIFIC:
        text = pattern.sub(replacement, text)
    return text


def watch_this_rank(timeout: float | None = None) -> None:
    """In a rank under torchrun: write every thread's stack to stderr on STACK_DUMP_SIGNAL (as
    :func:`run_torchrun` asks at its deadline). With ``timeout``, this rank's own deadline: then it
    writes where it was to its stderr and a LaunchTimeout as its error (``TORCHELASTIC_ERROR_FILE``),
    and ends with exit code 1; torchrun stops the other ranks with SIGTERM, on which each writes
    where it was too. torchrun itself has no deadline for a job (its ranks may wait for ever)."""
    write_stacks_on_signal()
    if timeout is None:
        return
    if hasattr(signal, "SIGTERM"):
        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    rank = int(os.environ["RANK"])

    def expire() -> None:
        print(f"[rank{rank}]: did not finish within its {timeout:g} s deadline (--timeout); it was here:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            raise LaunchTimeout(timeout, [rank])
        except LaunchTimeout as exc:
            rank_files.write_error(exc)
        os._exit(1)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    # If the worker holds the interpreter (C code that never lets go of the GIL), the timer cannot
    # run; faulthandler's own thread still writes the stacks and ends the process.
    faulthandler.dump_traceback_later(timeout + 10, exit=True, file=sys.stderr)


def run_this_rank(target: str) -> None:
    """Under torchrun: write this rank's place to its ``rank.json``, import ``module:function``, call it
    with this rank's RANK and WORLD_SIZE, write what it returns to its ``result.json``, and print it
    as one JSON line unless the rank's stdout goes to its folder (``--redirects``).
    What it raises goes, as under ``@record``, to the error file torchrun names in
    ``TORCHELASTIC_ERROR_FILE``. Imports no torch: ranks that run a function reading only the
    environment start and fail in a fraction of a second."""
    rank_files.write_rank()  # first: a rank that dies without a word is still read back as itself
    watch_this_rank()
    fn = pkgutil.resolve_name(target)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        result = fn(rank, world_size)
    except Exception as exc:
        rank_files.write_error(exc)
        # One line that names the rank, as the [rankN]: prefix of init_process_group's excepthook does
        # (this process never imports torch).
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
    # Also printed, unless this rank's stdout goes to its folder too (--redirects), where the file says it.
    if not rank_files.write_result(rank, result) or not rank_files.stdout_in_folder():
        print(rank_files.json_line({"rank": rank, "result": result}), flush=True)


if __name__ == "__main__":
    # python -m ddp_lib.torchrun my_module:my_worker   (as torchrun's program)
    run_this_rank(sys.argv[1])
