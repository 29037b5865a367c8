"""Lesson 07: run a torchrun job, and while it runs ask each rank for its Python stack
(``faulthandler`` prints it on SIGUSR1), as one would with ``kill -USR1 <pid>`` on a cluster node;
then read the job's error files, the records torchrun's summary is made from."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from ddp_lib.errors import readable
from ddp_lib.torchrun import clean_env, stop_torchruns


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str  # torchrun's log and the ranks' stderr: timestamps, hosts and PIDs, not for printing
    dumps: dict[int, str]  # rank -> its stack as faulthandler wrote it, for reading (not parsed)
    errors: dict[int, dict]  # rank -> its error file (written by @record when it raised); none if it did not


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
    """Start torchrun ``cmd`` (one node); once every rank has printed "started", wait ``after_s`` and
    send each rank SIGUSR1, one at a time; wait for the job to end and read its error files."""
    with (tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err,
          tempfile.TemporaryDirectory() as log_dir):
        # PET_LOG_DIR is torchrun's --log-dir: its ranks' error files land there, not in a
        # temporary folder of torchrun's own.
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=clean_env({"PET_LOG_DIR": log_dir}))
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
                try:
                    os.kill(pid, signal.SIGUSR1)
                except ProcessLookupError:  # it ended meanwhile (torchrun stopped it): no dump
                    stacks_at.pop()
                    continue
                time.sleep(0.3)  # one dump at a time, so that they do not interleave
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            stop_torchruns([proc])  # torchrun and its ranks, which run in sessions of their own
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        errors = error_files(log_dir)
    dumps = {}
    for (rank, start), (_, end) in zip(stacks_at, stacks_at[1:] + [(None, len(stderr))]):
        # For display: the lines of faulthandler's format that the rank wrote to stderr after its
        # signal, up to the first other line (torchrun's log, another rank's traceback).
        lines = []
        for line in stderr[start:end].splitlines():
            if not line.startswith(("Current thread ", "Thread 0x", "  File ")):
                break
            lines.append(line)
        dumps[rank] = "\n".join(lines)
    return Finished(proc.returncode, stdout, stderr, dumps, errors)


def error_files(log_dir: str) -> dict[int, dict]:
    """{rank: error file} of a one-node torchrun job's last attempt under ``log_dir`` (its --log-dir):
    ``<log_dir>/<run id>_<random>/attempt_<n>/<local rank>/error.json``, written by ``@record`` in a
    rank that raised. On one node the local rank is the rank."""
    attempts = sorted(glob.glob(os.path.join(log_dir, "*", "attempt_*")), key=lambda p: int(p.rsplit("_", 1)[1]))
    if not attempts:
        return {}
    errors = {}
    for path in glob.glob(os.path.join(attempts[-1], "*", "error.json")):
        with open(path) as f:
            errors[int(os.path.basename(os.path.dirname(path)))] = json.load(f)["message"]
    return errors


def root_cause_lines(errors: dict[int, dict], world_size: int) -> list[str]:
    """What the error files say, as torchrun's summary decides it: the root cause is the error file
    with the earliest timestamp; a rank without one did not raise (torchrun stopped it, or a signal
    ended it)."""
    if not errors:
        return ["no error file: no rank raised"]
    root = min(sorted(errors), key=lambda rank: int(errors[rank]["extraInfo"]["timestamp"]))
    lines = [f"root cause (earliest error file): rank {root}, {readable(errors[root]['message'], 90)}"]
    lines += [f"rank {rank}: error file, {readable(errors[rank]['message'], 90)}"
              for rank in sorted(errors) if rank != root]
    lines += [f"rank {rank}: no error file (it did not raise)" for rank in range(world_size) if rank not in errors]
    return lines
