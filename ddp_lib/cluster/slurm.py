"""A one-machine SLURM cluster for real: the two hosts of :mod:`ddp_lib.cluster.hosts` as two
SLURM nodes, slurmctld on node0, one slurmd on each host, munge for authentication; every
file (configuration, munge key, state, logs) in a temporary directory. Needs root, Linux and the
Debian packages ``slurmctld slurmd slurm-client munge``.

    with slurm_cluster() as cluster:
        job = cluster.sbatch("slurm/train.sbatch", env={"PYTHON": sys.executable})
        job.results     # every rank's result, in rank order, read from its folder under RUN_DIR
        job.output      # what the batch script and the torchruns printed

Everything is stopped and removed on the way out (daemons, namespaces, files).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from ddp_lib.cluster.hosts import Host, two_hosts
from ddp_lib.cluster.hosts import unavailable as hosts_unavailable
from ddp_lib.errors import WorkerError
from ddp_lib.launch import _record as rank_files

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo")
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")

_CONF = """\
ClusterName=ddplib
SlurmctldHost={head}({head_addr})
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={workdir}/state
SlurmdSpoolDir={workdir}/spool-%n
SlurmctldPidFile={workdir}/slurmctld.pid
SlurmdPidFile={workdir}/slurmd-%n.pid
SlurmctldLogFile={workdir}/slurmctld.log
SlurmdLogFile={workdir}/slurmd-%n.log
# No cgroups, no accounting: nothing outside this directory is touched.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
{nodes}
PartitionName=debug Nodes={names} Default=YES MaxTime=30 State=UP
"""


# A two-node job whose rank 1 raises once the group is up (rank 0 then finds it gone): each node's
# torchrun prints a failure summary of its own, and srun --label puts the task's number before
# each line. Written to a file and given to SlurmCluster.sbatch.
FAILING_JOB = """\
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --label --cpus-per-task="$SLURM_CPUS_PER_TASK" "$PYTHON" -m torch.distributed.run \\
    --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="$head:29400" --rdzv-id="$SLURM_JOB_ID" \\
    --rdzv-conf=join_timeout=60,read_timeout=30 --max-restarts=0 --log-dir="$RUN_DIR" \\
    -m ddp_lib.torchrun ddp_lib.cluster.probe:fail_on_rank1
"""

_LABELLED = re.compile(r"^(\d+): (.*)$")
_FIELD = re.compile(r"^  (time|host|rank) +: (.*)$")


@dataclass
class RootCause:
    """The "Root Cause" of one torchrun's failure summary, in a job's output under ``srun --label``."""

    label: str  # srun's task number: which node's torchrun printed it
    time: str  # as torchrun prints it, 2026-01-31_12:00:00: sorts as text
    host: str
    rank: str  # "1 (local_rank: 0)"
    error: str  # the last line of the failed rank's traceback
    lines: list[str]  # the labelled lines it was read from: time, host, rank, error


def root_causes(output: str) -> list[RootCause]:
    """Every torchrun failure summary's root cause in ``output`` (``srun --label``), in the order printed."""
    by_label: dict[str, list[str]] = {}
    for line in output.splitlines():
        found = _LABELLED.match(line)
        if found:
            by_label.setdefault(found[1], []).append(found[2])
    causes = []
    for label, lines in by_label.items():
        for start in [i for i, line in enumerate(lines) if line.startswith("Root Cause (first observed failure)")]:
            block = lines[start + 1:]
            block = block[:next((i for i, line in enumerate(block) if line.startswith("=====")), len(block))]
            fields = {m[1]: m[2].strip() for m in map(_FIELD.match, block) if m}
            error = next((line.strip() for line in reversed(block) if line.strip()), "")
            shown = [f"{label}: {line}" for line in block if _FIELD.match(line)]
            causes.append(RootCause(label, fields.get("time", ""), fields.get("host", ""), fields.get("rank", ""),
                                    error, shown + [f"{label}:   {error}"]))
    return sorted(causes, key=lambda c: output.index(c.lines[0]) if c.lines else 0)


def unavailable() -> str | None:
    """Why a SLURM cluster cannot be started here (one sentence), or None if it can."""
    reason = hosts_unavailable()
    if reason:
        return reason
    missing = [tool for tool in DAEMONS + CLIENTS if shutil.which(tool) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} not found; on Debian: "
                f"apt-get install {' '.join(PACKAGES)})")
    return None


@dataclass
class BatchJob:
    """A finished batch job: its id, SLURM's verdict, what it printed and what its ranks left."""

    job_id: int
    returncode: int  # sbatch --wait's exit code: the job's
    output: str  # the batch script's stdout and stderr, and each torchrun's (srun --label: "N: " per node)
    seconds: float
    results: list = field(default_factory=list)  # every finished rank's result, in rank order
    lines: list[str] = field(default_factory=list)  # what the ranks printed on stdout, in rank order
    error: WorkerError | None = None  # the failed rank, blamed as the launcher blames


class SlurmCluster:
    """A running one-machine cluster (from :func:`slurm_cluster`)."""

    def __init__(self, hosts: tuple[Host, Host], workdir: str):
        self.hosts = hosts
        self.workdir = workdir
        self.conf = os.path.join(workdir, "slurm.conf")

    def command(self, argv: list[str]) -> list[str]:
        """A SLURM client command (sbatch, sinfo, ...) as run on the head node."""
        return self.hosts[0].command(argv)

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        from ddp_lib.torchrun import clean_env

        return clean_env({"SLURM_CONF": self.conf, **(extra or {})})

    def sinfo(self) -> str:
        """``sinfo``'s node list: one line per node, name and state."""
        proc = subprocess.run(self.command(["sinfo", "-N", "-h", "-o", "%N %T"]), capture_output=True,
                              text=True, env=self.env(), timeout=30)
        return proc.stdout.strip()

    def sbatch(self, script: str, *, env: dict[str, str] | None = None, timeout: float = 300,
               cwd: str | None = None) -> BatchJob:
        """Submit ``script`` from the head node, wait for the job to end (``sbatch --wait``), and
        return its output and what its ranks left in their folders under ``RUN_DIR`` (a new folder
        in this cluster's directory, which both nodes see, given to the script). ``env``: extra
        variables (exported to the job)."""
        output = os.path.join(self.workdir, "job-%j.out")
        run_dir = tempfile.mkdtemp(prefix="run-", dir=self.workdir)
        start = time.monotonic()
        proc = subprocess.run(self.command(["sbatch", "--wait", "--parsable", f"--output={output}",
                                            os.path.abspath(script)]),
                              capture_output=True, text=True, env=self.env({"RUN_DIR": run_dir, **(env or {})}),
                              timeout=timeout, cwd=cwd)
        seconds = time.monotonic() - start
        first = proc.stdout.strip().split(";")[0]
        if not first.isdigit():
            raise RuntimeError(f"sbatch failed (exit code {proc.returncode}): {proc.stderr.strip()[-500:]}")
        job_id = int(first)
        with open(output.replace("%j", str(job_id))) as f:
            text = f.read()
        # Both nodes' torchruns share RUN_DIR (new for this job), each in a run folder of its own; each
        # rank wrote its global rank there (rank.json).
        run = rank_files.read_run(rank_files.runs_in(run_dir))
        return BatchJob(job_id, proc.returncode, text, seconds, run.results, run.lines, run.error)

    def logs(self) -> str:
        """The daemons' log files, for a report when something fails."""
        parts = []
        for name in sorted(os.listdir(self.workdir)):
            if name.endswith(".log"):
                with open(os.path.join(self.workdir, name), errors="replace") as f:
                    parts.append(f"== {name}\n{f.read()[-3000:]}")
        return "\n".join(parts)


def _start(stack: ExitStack, argv: list[str], log: str, env: dict[str, str]) -> subprocess.Popen:
    """Start a daemon in the foreground; stop it (SIGTERM, then SIGKILL) when ``stack`` closes."""
    out = stack.enter_context(open(log, "w"))
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)

    def stop():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()

    stack.callback(stop)
    return proc


def _wait_until(check, what: str, timeout: float, logs) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise RuntimeError(f"the one-machine SLURM cluster did not come up: {what} after {timeout:.0f} s\n{logs()}")
        time.sleep(0.2)


@contextmanager
def slurm_cluster(timeout: float = 60) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld (on node0) and a slurmd per host; yield the cluster once both
    nodes are idle (within ``timeout`` seconds); stop and remove everything on the way out."""
    reason = unavailable()
    if reason:
        raise RuntimeError(f"cannot start SLURM here: {reason}")
    workdir = tempfile.mkdtemp(prefix="ddp_lib-slurm-")
    try:
        with two_hosts() as hosts, ExitStack() as stack:
            for sub in ["state"] + [f"spool-{h.name}" for h in hosts]:
                os.makedirs(os.path.join(workdir, sub))
            munge_socket = os.path.join(workdir, "munge.socket")
            key = os.path.join(workdir, "munge.key")
            with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(os.urandom(1024))  # this cluster's own key; the machine's is never used
            nodes = "\n".join(f"NodeName={h.name} NodeAddr={h.addr} CPUs={os.cpu_count() or 1} State=UNKNOWN"
                              for h in hosts)
            with open(os.path.join(workdir, "slurm.conf"), "w") as f:
                f.write(_CONF.format(head=hosts[0].name, head_addr=hosts[0].addr, munge_socket=munge_socket,
                                     workdir=workdir, nodes=nodes, names=",".join(h.name for h in hosts)))
            cluster = SlurmCluster(hosts, workdir)
            env = cluster.env()
            _start(stack, ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge_socket}",
                           f"--pid-file={workdir}/munged.pid", f"--log-file={workdir}/munged.log",
                           f"--seed-file={workdir}/munged.seed"], os.path.join(workdir, "munged.out"), env)
            _wait_until(lambda: os.path.exists(munge_socket), "munged's socket", timeout, cluster.logs)
            _start(stack, hosts[0].command(["slurmctld", "-D", "-f", cluster.conf]),
                   os.path.join(workdir, "slurmctld.out"), env)
            for host in hosts:
                _start(stack, host.command(["slurmd", "-D", "-f", cluster.conf]),
                       os.path.join(workdir, f"slurmd-{host.name}.out"), env)
            _wait_until(lambda: cluster.sinfo().split() == [hosts[0].name, "idle", hosts[1].name, "idle"],
                        "both nodes idle", timeout, cluster.logs)
            yield cluster
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    # python -m ddp_lib.cluster.slurm SCRIPT   runs one batch script on a fresh one-machine cluster
    with slurm_cluster() as running:
        done = running.sbatch(sys.argv[1], env={"PYTHON": sys.executable})
        print(done.output, end="")  # each node's torchrun lines labelled "N: " by srun --label
        print("\n".join(done.lines))  # what the ranks printed, from their folders
        sys.exit(done.returncode)
