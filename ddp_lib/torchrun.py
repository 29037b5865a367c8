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
import subprocess
import sys
from dataclasses import dataclass, field

from ddp_lib.checks import LAUNCHER_VARS, TORCHRUN_VARS

# Variables a launcher sets for its ranks: a torchrun started from inside a rank must not
# inherit them, or its workers would join the outer job's store.
_LAUNCH_VARS = (*TORCHRUN_VARS, *LAUNCHER_VARS, "DDP_LIB_BACKEND")
_RECORD = '{"rank": '
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
    """This process's environment without any launcher's rank variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.update(extra or {})
    return env


def run_torchrun(cmd: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> TorchrunJob:
    """Run one torchrun command to the end; return its results and output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env(env))
    results, lines = parse_results(proc.stdout)
    return TorchrunJob(proc.returncode, results, lines, proc.stderr)


def run_together(cmds: list[list[str]], timeout: float = 120, env: dict[str, str] | None = None) -> list[TorchrunJob]:
    """Start every command at once (separate jobs side by side on this machine); wait for all."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(env))
             for cmd in cmds]
    jobs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            jobs.append(TorchrunJob(proc.returncode, *parse_results(out), err))
    finally:
        for proc in procs:  # nothing outlives the call, also on a timeout
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return jobs


def run_nodes(program: list[str], *, nnodes: int = 2, nproc_per_node: int | list[int] = 1, max_restarts: int = 0,
              static: bool = False, node_order: list[int] | None = None, timeout: float = 120,
              env: dict[str, str] | None = None, options: tuple[str, ...] = ()) -> TorchrunJob:
    """Start ``nnodes`` torchrun processes on this machine, as if each were a node, meeting on
    127.0.0.1 (a free port); wait for all; merge their results in rank order.
    ``nproc_per_node``: one count for every node, or one per node. c10d numbers the nodes itself;
    ``static=True`` gives node i ``--node-rank=node_order[i]`` (default i) instead."""
    from ddp_lib.process_group import free_port  # here, so that ranks started by run_this_rank need no torch

    counts = [nproc_per_node] * nnodes if isinstance(nproc_per_node, int) else list(nproc_per_node)
    if len(counts) != nnodes:
        raise ValueError(f"nproc_per_node has {len(counts)} counts for {nnodes} nodes; give one per node or one int")
    order = node_order or list(range(nnodes))
    endpoint = f"127.0.0.1:{free_port()}"
    cmds = [torchrun_command(program, nproc_per_node=count, nnodes=nnodes, rdzv_endpoint=endpoint,
                             max_restarts=max_restarts, node_rank=order[i] if static else None, options=options)
            for i, count in enumerate(counts)]
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(env))
             for cmd in cmds]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=timeout))
    finally:
        for node in nodes:  # a node left waiting for its peers must not outlive the call
            if node.poll() is None:
                node.kill()
                node.wait()
    results, lines = parse_results("\n".join(out for out, _ in outputs))
    return TorchrunJob(max(abs(n.returncode) for n in nodes), results, lines, "\n".join(err for _, err in outputs))


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


def run_this_rank(target: str) -> None:
    """Under torchrun: import ``module:function``, call it with this rank's RANK and WORLD_SIZE,
    print its result as one JSON line (what :func:`parse_results` reads)."""
    fn = pkgutil.resolve_name(target)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        result = fn(rank, world_size)
    except Exception as exc:
        # One line that names the rank, as torchrun prints for workers wrapped in @record.
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
    print(json.dumps({"rank": rank, "result": result}, default=repr), flush=True)


if __name__ == "__main__":
    # python -m ddp_lib.torchrun my_module:my_worker   (as torchrun's program)
    run_this_rank(sys.argv[1])
