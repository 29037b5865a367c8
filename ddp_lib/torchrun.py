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
import subprocess
import sys
from dataclasses import dataclass, field

from ddp_lib.checks import LAUNCHER_VARS, TORCHRUN_VARS

# Variables a launcher sets for its ranks: a torchrun started from inside a rank must not
# inherit them, or its workers would join the outer job's store.
_LAUNCH_VARS = (*TORCHRUN_VARS, *LAUNCHER_VARS, "DDP_LIB_BACKEND",
                # Unbuffered output writes a line and its newline separately: lines of ranks interleave.
                "PYTHONUNBUFFERED")
_RECORD = '{"rank": '


@dataclass
class TorchrunJob:
    """What came back from one or more torchrun processes."""

    returncode: int
    results: list  # each rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # other stdout lines (rank 0's progress)
    stderr: str = ""  # torchrun's own log: timestamps, host names and PIDs; not for printing


def torchrun_command(program: list[str], *, nproc_per_node: int = 2, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, max_restarts: int = 0, run_id: str = "ddp-lib",
                     options: tuple[str, ...] = ()) -> list[str]:
    """The argument list of ``python -m torch.distributed.run`` (torchrun) for ``program``
    (e.g. ``["-m", "ddp_lib", "run", "train", "--json"]``). Without ``rdzv_endpoint``,
    one node with ``--standalone`` (a c10d rendezvous on a free local port). ``options``: more
    torchrun options, e.g. ``("--rdzv-conf=join_timeout=20",)``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc_per_node}",
           f"--max-restarts={max_restarts}"]
    if rdzv_endpoint is None:
        cmd.append("--standalone")
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
    """This process's environment without any launcher's rank variables (nor PYTHONUNBUFFERED),
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    env.update(extra or {})
    return env


def run_torchrun(cmd: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> TorchrunJob:
    """Run one torchrun command to the end; return its results and output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env(env))
    results, lines = parse_results(proc.stdout)
    return TorchrunJob(proc.returncode, results, lines, proc.stderr)


def run_nodes(program: list[str], *, nnodes: int = 2, nproc_per_node: int = 1, max_restarts: int = 0,
              timeout: float = 120, env: dict[str, str] | None = None) -> TorchrunJob:
    """Start ``nnodes`` torchrun processes on this machine, as if each were a node, meeting at a
    c10d rendezvous on 127.0.0.1 (a free port); wait for all; merge their results in rank order."""
    from ddp_lib.process_group import free_port  # here, so that ranks started by run_this_rank need no torch

    endpoint = f"127.0.0.1:{free_port()}"
    cmd = torchrun_command(program, nproc_per_node=nproc_per_node, nnodes=nnodes,
                           rdzv_endpoint=endpoint, max_restarts=max_restarts)
    nodes = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(env))
             for _ in range(nnodes)]
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
