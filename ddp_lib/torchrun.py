"""Running a worker under real ``torchrun`` from Python (a notebook, a test) and reading back
what each rank returned.

    cmd = torchrun_command(["-m", "ddp_lib", "run", "train", "--json"], nproc_per_node=2)
    job = run_torchrun(cmd)          # job.results: one result per rank, in rank order

Ranks report through the ``--json`` line the CLI prints under torchrun:
``{"rank": r, "result": ...}``. Everything else on stdout is kept as ``job.lines``.
"""

from __future__ import annotations

import json
import os
import pkgutil
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ddp_lib.launch_checks import LAUNCHER_VARS, TORCHRUN_VARS

# Variables a launcher sets for its ranks: a torchrun started from inside a rank must not
# inherit them, or its workers would join the outer job's store.
_LAUNCH_VARS = (*TORCHRUN_VARS, *LAUNCHER_VARS, "DDP_LIB_BACKEND")
_RECORD = '{"rank": '
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
    """What came back from one or more torchrun processes."""

    returncode: int
    results: list  # each rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # other stdout lines (rank 0's progress)
    stderr: str = ""  # torchrun's own log: timestamps, host names and PIDs; not for printing


def torchrun_command(program: list[str], *, nproc_per_node: int = 2, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, max_restarts: int = 0, run_id: str = "ddp-lib",
                     node_rank: int | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """The argument list of ``python -m torch.distributed.run`` (torchrun) for ``program``
    (e.g. ``["-m", "ddp_lib", "run", "train", "--json"]``). Without ``rdzv_endpoint``, one node
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


def parse_results(stdout: str) -> tuple[list, list[str]]:
    """Split torchrun's stdout into the ranks' JSON results (in rank order) and the other lines."""
    # Ranks share one stdout: a rank whose line is written in two pieces (text, then newline)
    # can end up with another rank's line glued on, so each record is decoded where it starts.
    decoder = json.JSONDecoder()
    found, lines = {}, []
    for line in stdout.splitlines():
        text = []
        while (start := line.find(_RECORD)) >= 0:
            record, end = decoder.raw_decode(line, start)
            found[record["rank"]] = record["result"]
            text.append(line[:start])
            line = line[end:]
        if "".join(text + [line]).strip():
            lines.append("".join(text + [line]))
    return [found[r] for r in sorted(found)], lines


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
    for arg in args:
        arg = re.sub(r"^(--master-port=|--rdzv-endpoint=[^:]+:)\d+$", r"\g<1>PORT", arg)
        name, equals, value = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
        if value.startswith(_TMP):
            value = "DIR"
        shown.append(f"{name}{equals}{value}")
    return " ".join(["torchrun"] + shown if args is not cmd else shown)


def _run_all(cmds: list[list[str]], timeout: float, env: dict[str, str] | None, show: bool,
             labels: list[str], stop_on_failure: bool = False) -> list[tuple[int, str, str]]:
    """Start every command at once; return (exit code, stdout, stderr) of each. With ``show``, a
    line per command as it starts, then every line the ranks print that is not a result, as it comes
    (only rank 0 prints such lines in ddp_lib's workers). ``stop_on_failure``: once one command
    fails, stop the others. Nothing outlives the call."""
    lock = threading.Lock()
    procs, outputs, readers = [], [], []

    def read(stream, into: list[str], echo: bool) -> None:
        for line in stream:
            into.append(line)
            if echo:
                _, text = parse_results(line)
                if text:
                    with lock:
                        print("\n".join(text), flush=True)

    try:
        for label, cmd in zip(labels, cmds):
            if show:
                print(f"starting{label}: {command_text(cmd)}", flush=True)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                    env=clean_env(env))
            procs.append(proc)
            out, err = [], []
            outputs.append((out, err))
            readers += [threading.Thread(target=read, args=(proc.stdout, out, show), daemon=True),
                        threading.Thread(target=read, args=(proc.stderr, err, False), daemon=True)]
            readers[-2].start()
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
                        proc.kill()
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmds[0], timeout)
            time.sleep(0.05)
        for reader in readers:
            reader.join()
    finally:
        for proc in procs:  # a job left waiting for its peers must not outlive the call
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [(proc.returncode, "".join(out), "".join(err)) for proc, (out, err) in zip(procs, outputs)]


def run_torchrun(cmd: list[str], timeout: float = 120, env: dict[str, str] | None = None,
                 show: bool = False) -> TorchrunJob:
    """Run one torchrun command to the end; return its results and output. ``show``: print the
    command as it starts and rank 0's lines as they come."""
    ((code, out, err),) = _run_all([cmd], timeout, env, show, [""])
    return TorchrunJob(code, *parse_results(out), err)


def run_together(cmds: list[list[str]], timeout: float = 120, env: dict[str, str] | None = None,
                 show: bool = False) -> list[TorchrunJob]:
    """Start every command at once (separate jobs side by side on this machine); wait for all.
    ``show``: print each command as it starts, and rank 0's lines as they come."""
    labels = [f" job {i + 1}" for i in range(len(cmds))] if len(cmds) > 1 else [""]
    done = _run_all(cmds, timeout, env, show, labels)
    return [TorchrunJob(code, *parse_results(out), err) for code, out, err in done]


def _free_port() -> int:
    """A local TCP port that was free a moment ago (the OS picks it). ``process_group.free_port``
    does the same, but importing that module imports torch, which neither the notebook that runs
    torchrun nor its ranks otherwise need."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_nodes(program: list[str], *, nnodes: int = 2, nproc_per_node: int | list[int] = 1, max_restarts: int = 0,
              static: bool = False, node_order: list[int] | None = None, timeout: float = 120,
              env: dict[str, str] | None = None, options: tuple[str, ...] = (),
              node_options: list[tuple[str, ...]] | None = None, show: bool = False) -> TorchrunJob:
    """Start ``nnodes`` torchrun processes on this machine, as if each were a node, meeting on
    127.0.0.1 (a free port); wait for all (once one fails, stop the others); merge their results
    in rank order.
    ``nproc_per_node``: one count for every node, or one per node. c10d numbers the nodes itself;
    ``static=True`` gives node i ``--node-rank=node_order[i]`` (default i) instead. ``options``: more
    torchrun options for every node; ``node_options[i]``: for node i only. ``show``: print
    each node's command as it starts, and rank 0's lines as they come."""
    counts = [nproc_per_node] * nnodes if isinstance(nproc_per_node, int) else list(nproc_per_node)
    if len(counts) != nnodes:
        raise ValueError(f"nproc_per_node has {len(counts)} counts for {nnodes} nodes; give one per node or one int")
    order = node_order or list(range(nnodes))
    endpoint = f"127.0.0.1:{_free_port()}"
    cmds = [torchrun_command(program, nproc_per_node=count, nnodes=nnodes, rdzv_endpoint=endpoint,
                             max_restarts=max_restarts, node_rank=order[i] if static else None,
                             options=options + (node_options[i] if node_options else ()))
            for i, count in enumerate(counts)]
    done = _run_all(cmds, timeout, env, show, [f" torchrun {i + 1} of {nnodes}" for i in range(nnodes)],
                    stop_on_failure=True)
    results, lines = parse_results("\n".join(out for _, out, _ in done))
    return TorchrunJob(max(abs(code) for code, _, _ in done), results, lines, "\n".join(err for _, _, err in done))


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


def rank_errors(log_dir: str, first_rank: int = 0) -> dict[int, str]:
    """What each rank of one torchrun raised, ``{rank: "Type: message"}``, from the error files
    torch's error handler writes (``@record``, or :func:`run_this_rank`) into that torchrun's
    ``--log-dir``: ``RUN/attempt_N/LOCAL_RANK/error.json``, the last attempt's. ``first_rank``: the
    global rank of this node's local rank 0. Ranks stopped by a signal write none."""
    found = {}
    for path in sorted(Path(log_dir).glob("*/attempt_*/*/error.json"), key=lambda p: int(p.parent.parent.name[8:])):
        message = json.loads(path.read_text())["message"]
        text = message["message"] if isinstance(message, dict) else str(message)
        found[first_rank + int(path.parent.name)] = text
    return found


def _record_exception(exc: BaseException) -> None:
    """Write ``exc`` (being handled) to the file torchrun names in ``TORCHELASTIC_ERROR_FILE``, as
    torch's ``ErrorHandler.record_exception`` does (``elastic/multiprocessing/errors/error_handler.py``),
    the JSON its agent reads back for the failure summary. Written here rather than through torch's
    handler: importing it imports torch, a second or more, and a rank that only reads its
    environment must fail as fast as it succeeds."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": f"{type(exc).__name__}: {exc}",
                        "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    with open(path, "w") as f:
        json.dump(data, f)


def run_this_rank(target: str) -> None:
    """Under torchrun: import ``module:function``, call it with this rank's RANK and WORLD_SIZE,
    print its result as one JSON line (what :func:`parse_results` reads). What it raises goes,
    as under ``@record``, to the error file torchrun names in ``TORCHELASTIC_ERROR_FILE``. Imports
    no torch: ranks that run a function reading only the environment start and fail in a fraction
    of a second."""
    fn = pkgutil.resolve_name(target)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        result = fn(rank, world_size)
    except Exception as exc:
        _record_exception(exc)
        # One line that names the rank, as torchrun prints for workers wrapped in @record.
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
    print(json.dumps({"rank": rank, "result": result}, default=repr), flush=True)


if __name__ == "__main__":
    # python -m ddp_lib.torchrun my_module:my_worker   (as torchrun's program)
    run_this_rank(sys.argv[1])
