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
    dumps: list[str] | dict[int, str]  # the stacks faulthandler wrote, in order (run_and_dump_stacks: by rank)
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


class RunningTorchrun:
    """A one-node torchrun job, as a ``with`` block. Entering starts ``cmd`` and returns once
    ``world_size`` ranks have printed "started", and ``after_s`` more; ``pid`` is torchrun's process id.
    Leaving waits for the job to end (stopping it after ``timeout`` s in all) and sets ``finished``:
    exit code, output, and each rank's error file."""

    def __init__(self, cmd: list[str], world_size: int, after_s: float = 1.0, timeout: float = 90):
        self.cmd, self.world_size, self.after_s, self.timeout = cmd, world_size, after_s, timeout
        self.finished: Finished | None = None

    def __enter__(self) -> RunningTorchrun:
        self._out, self._err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self._log_dir = tempfile.TemporaryDirectory()
        # PET_LOG_DIR is torchrun's --log-dir: its ranks' error files land there, not in a
        # temporary folder of torchrun's own.
        self._proc = subprocess.Popen(self.cmd, stdout=self._out, stderr=self._err, text=True,
                                      env=clean_env({"PET_LOG_DIR": self._log_dir.name}))
        self.pid = self._proc.pid
        self._deadline = time.monotonic() + self.timeout
        while self._proc.poll() is None and time.monotonic() < self._deadline:
            self._out.seek(0)
            if self._out.read().count(" started") >= self.world_size:
                break
            time.sleep(0.1)
        time.sleep(self.after_s)
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            if exc_info[0] is None:
                self._proc.wait(timeout=max(1.0, self._deadline - time.monotonic()))
        finally:
            stop_torchruns([self._proc])  # torchrun and its ranks, which run in sessions of their own
            for stream in (self._out, self._err):
                stream.seek(0)
            stdout, stderr = self._out.read(), self._err.read()
            self.finished = Finished(self._proc.returncode, stdout, stderr, stack_dumps(stderr),
                                     error_files(self._log_dir.name))
            self._out.close()
            self._err.close()
            self._log_dir.cleanup()


def stack_dumps(stderr: str) -> list[str]:
    """The stacks ``faulthandler`` wrote to ``stderr``, in the order written: each from its
    "Current thread" line, with the "File" lines after it."""
    dumps: list[list[str]] = []
    for line in stderr.splitlines():
        if line.startswith("Current thread "):
            dumps.append([line])
        elif dumps and dumps[-1][-1] is not None and line.startswith('  File "'):
            dumps[-1].append(line)
        elif dumps:
            dumps[-1].append(None)  # the dump has ended: the next "File" line is not its own
    return ["\n".join(line for line in dump if line is not None) for dump in dumps]


def run_and_dump_stacks(cmd: list[str], world_size: int, after_s: float = 1.0, timeout: float = 90) -> Finished:
    """Start torchrun ``cmd`` (one node); once every rank has printed "started", wait ``after_s`` and
    send each rank SIGUSR1, one at a time; wait for the job to end and read its error files.
    ``dumps`` maps each rank signalled to its stack."""
    signalled = []
    with RunningTorchrun(cmd, world_size, after_s, timeout) as job:
        for rank, pid in sorted(rank_pids(job.pid).items()):
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:  # it ended meanwhile (torchrun stopped it): no dump
                continue
            signalled.append(rank)
            time.sleep(0.3)  # one dump at a time, so that they do not interleave
    job.finished.dumps = dict(zip(signalled, job.finished.dumps))
    return job.finished


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
