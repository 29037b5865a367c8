"""torchrun's command line, built and read from Python: the command of one job or of several
"nodes" on this machine, the options that put every rank's files in a folder of its own, the
environment a torchrun is started with, and the command as a learner would type it."""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile

from ddp_lib.launch import _record as rank_files
from ddp_lib.launch._checks import LAUNCHER_VARS, TORCHRUN_VARS

# Variables a launcher sets for its ranks: a torchrun started from inside a rank must not
# inherit them, or its workers would join the outer job's store.
_LAUNCH_VARS = (*TORCHRUN_VARS, *LAUNCHER_VARS, "DDP_LIB_BACKEND", "TORCHELASTIC_ERROR_FILE")
_TMP = tempfile.gettempdir()


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
