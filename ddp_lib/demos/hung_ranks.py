"""Lesson 07: run a torchrun job, and while it runs ask each rank for its Python stack
(``faulthandler`` prints it on SIGUSR1), as one would with ``kill -USR1 <pid>`` on a cluster node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from ddp_lib.errors import readable
from ddp_lib.torchrun import clean_env, stop_torchruns

_FRAME = re.compile(r'File "(?:[^"]*/)?([^"/]+)", line \d+ in (\w+)')


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str  # torchrun's log and the ranks' stderr: timestamps, hosts and PIDs, not for printing
    stacks: dict[int, list[str]]  # rank -> its frames, innermost first, as "function (file)"
    dumps: dict[int, str]  # rank -> its stack as faulthandler wrote it


def rank_pids(torchrun_pid: int) -> dict[int, int]:
    """The ranks torchrun started, {rank: pid}, found as `ps` would: children of torchrun with RANK set."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != torchrun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue  # gone already
        if b"RANK" in env:
            pids[int(env[b"RANK"])] = int(entry)
    return pids


def run_and_dump_stacks(cmd: list[str], world_size: int, after_s: float = 1.0, timeout: float = 90) -> Finished:
    """Start torchrun ``cmd``; once every rank has printed "started", wait ``after_s`` and send each
    rank SIGUSR1, one at a time; wait for the job to end."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=clean_env())
        stacks_at: list[tuple[int, int]] = []  # (rank, offset in stderr where its dump starts)
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                out.seek(0)
                if out.read().count(" started") >= world_size:
                    break
                time.sleep(0.1)
            time.sleep(after_s)
            for rank, pid in sorted(rank_pids(proc.pid).items()):
                err.flush()
                stacks_at.append((rank, os.fstat(err.fileno()).st_size))
                os.kill(pid, signal.SIGUSR1)
                time.sleep(0.3)  # one dump at a time, so that they do not interleave
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            stop_torchruns([proc])  # torchrun and its ranks, which run in sessions of their own
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    stacks, dumps = {}, {}
    for (rank, start), (_, end) in zip(stacks_at, stacks_at[1:] + [(None, len(stderr))]):
        dump = stderr[start:end].split("\n\n")[0]
        stacks[rank] = [f"{fn} ({file})" for file, fn in _FRAME.findall(dump)]
        dumps[rank] = dump.strip()
    return Finished(proc.returncode, stdout, stderr, stacks, dumps)


_BLOCK = re.compile(r"rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+)")


def root_cause_lines(stderr: str) -> list[str]:
    """The lines worth reading in torchrun's ``ChildFailedError`` summary: the root cause (rank, exit
    code, last line of its traceback) and the ranks torchrun stopped, without times, hosts or PIDs
    (``ddp_lib.torchrun.failure_summary`` keeps the whole box)."""
    if "Root Cause (first observed failure):" not in stderr:
        return ["no failure summary"]
    failures, root = stderr.rsplit("Root Cause (first observed failure):", 1)
    failures = failures.rsplit("Failures:", 1)[-1]
    rank, code = _BLOCK.search(root).groups()
    last = [line.strip() for line in root.split("=====")[0].splitlines() if line.strip()][-1]
    lines = [f"root cause: rank {rank}, exit code {code}, {readable(last, 90)}"]
    lines += [f"stopped by torchrun: rank {r}, exit code {c}" for r, c in _BLOCK.findall(failures)]
    return lines
