"""slurm/train.sbatch run for real: a one-machine SLURM cluster (slurmctld, a slurmd on each of two
hosts in network namespaces, munge) runs the training job on two nodes, one torchrun per node, and
gives the one-machine result; afterwards no daemon, namespace or munge key is left. Needs root on
Linux; SLURM is installed from apt when missing (set DDP_LIB_NO_APT=1 to skip instead)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ddp_lib.cluster.hosts import left_behind
from ddp_lib.cluster.hosts import unavailable as hosts_unavailable
from ddp_lib.cluster.slurm import CLIENTS, DAEMONS, FAILING_JOB, PACKAGES, root_causes, slurm_cluster, unavailable
from ddp_lib.launch import run_ranks
from ddp_lib.workers.train import train

SCRIPT = Path(__file__).resolve().parents[1] / "slurm" / "train.sbatch"

needs_root_on_linux = pytest.mark.skipif(
    hosts_unavailable() is not None, reason=f"a one-machine SLURM cluster needs two hosts: {hosts_unavailable()}")


# The machine-wide key the munge package makes: the cluster brings its own, so none may be left behind.
MACHINE_MUNGE_KEY = "/etc/munge/munge.key"


# Only these tests install SLURM; the lesson runs where it is installed already.
def install_packages(timeout: float = 600) -> str:
    """Install SLURM and munge from apt if missing (root, Debian or Ubuntu), without starting
    their services and without leaving the machine-wide munge key the package makes (this
    cluster brings its own). Return what was done, in a sentence."""
    if not any(shutil.which(tool) is None for tool in DAEMONS + CLIENTS):
        return "SLURM and munge were installed already"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RuntimeError("installing SLURM needs root and apt-get (Debian or Ubuntu)")
    had_key = os.path.exists(MACHINE_MUNGE_KEY)
    policy = "/usr/sbin/policy-rc.d"
    own_policy = not os.path.exists(policy)
    if own_policy:  # the packages would otherwise start munge, slurmctld and slurmd as services
        with open(policy, "w") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    try:
        start = time.monotonic()
        if subprocess.run(install, capture_output=True, env=env, timeout=timeout).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=timeout, check=True)
            subprocess.run(install, capture_output=True, text=True, env=env, timeout=timeout, check=True)
    finally:
        if own_policy:
            os.remove(policy)
        if not had_key and os.path.exists(MACHINE_MUNGE_KEY):
            os.remove(MACHINE_MUNGE_KEY)
    return f"installed {' '.join(PACKAGES)} from apt in {time.monotonic() - start:.0f} s"


def daemon_pids() -> set[int]:
    """Process ids of every munged, slurmctld and slurmd on the machine."""
    found = [subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout for name in DAEMONS]
    return {int(pid) for out in found for pid in out.split()}


@pytest.fixture(scope="module")
def slurm():
    """SLURM's programs, installed from apt if they are missing and that is allowed."""
    reason = unavailable()
    if reason and shutil.which("apt-get") and os.environ.get("DDP_LIB_NO_APT") != "1":
        print(install_packages())
        reason = unavailable()
    if reason:
        pytest.skip(reason)


def test_sbatch_script_has_the_slurm_mapping():
    text = SCRIPT.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                 '--rdzv-endpoint="$head:$RDZV_PORT"', '--rdzv-id="$SLURM_JOB_ID"',
                 'srun --label --cpus-per-task="$SLURM_CPUS_PER_TASK" "$PYTHON" -m torch.distributed.run',
                 '--log-dir="$RUN_DIR" --redirects=3 --tee=2',
                 "#SBATCH --cpus-per-task="):
        assert line in text


@needs_root_on_linux
def test_the_sbatch_script_trains_on_two_slurm_nodes_like_one_machine(slurm):
    key_before, daemons_before = os.path.exists(MACHINE_MUNGE_KEY), daemon_pids()
    with slurm_cluster() as cluster:
        assert cluster.sinfo().splitlines() == ["node0 idle", "node1 idle"]
        ours = daemon_pids() - daemons_before
        assert len(ours) >= 4  # munged, slurmctld, a slurmd on each host
        job = cluster.sbatch(str(SCRIPT), env={"PYTHON": sys.executable, "EPOCHS": "3"})
        assert job.returncode == 0, job.output[-3000:] + cluster.logs()
    assert job.output.splitlines()[0] == "nodes: node0 node1 | rendezvous: node0:29400"
    assert job.error is None
    results, lines = job.results, job.lines  # from each rank's folder under RUN_DIR
    assert [r["rank"] for r in results] == [0, 1]
    reference = run_ranks(train, 2, args=(3, 16, 0.1, 0), show_output=False)
    for got, want in zip(results, reference):
        assert got["losses"] == want["losses"]
        assert got["checksum"] == pytest.approx(want["checksum"], abs=1e-6)
        assert (torch.tensor(got["params"]) - torch.tensor(want["params"])).abs().max().item() < 1e-6
    assert [line for line in lines if line.startswith("epoch ")][-1].startswith("epoch  3/3 [####################]")
    # Nothing left: daemons, namespaces, links, the machine-wide munge key.
    assert ours & daemon_pids() == set()
    assert left_behind(os.getpid()) == []
    assert os.path.exists(MACHINE_MUNGE_KEY) == key_before


SUMMARIES = """\
1: ============================================================
1: ddp_lib.torchrun FAILED
1: Root Cause (first observed failure):
1: [0]:
1:   time      : 2026-01-31_12:00:03
1:   host      : node1
1:   rank      : 1 (local_rank: 0)
1:   exitcode  : 1 (pid: 42)
1:   traceback : Traceback (most recent call last):
1:     File "probe.py", line 51, in fail_on_rank1
1:   ValueError: rank 1 was told to fail
1:
1: ============================================================
srun: error: node1: task 1: Exited with exit code 1
0: Root Cause (first observed failure):
0: [0]:
0:   time      : 2026-01-31_12:00:05
0:   host      : node0
0:   rank      : 0 (local_rank: 0)
0:   traceback : Traceback (most recent call last):
0:   RuntimeError: Connection closed by peer
0: ============================================================
"""


def test_root_causes_reads_each_labelled_summary_in_the_order_printed():
    causes = root_causes(SUMMARIES)
    assert [(c.label, c.host, c.rank, c.time) for c in causes] == [
        ("1", "node1", "1 (local_rank: 0)", "2026-01-31_12:00:03"),
        ("0", "node0", "0 (local_rank: 0)", "2026-01-31_12:00:05")]
    assert [c.error for c in causes] == ["ValueError: rank 1 was told to fail",
                                         "RuntimeError: Connection closed by peer"]
    assert causes[0].lines == ["1:   time      : 2026-01-31_12:00:03", "1:   host      : node1",
                               "1:   rank      : 1 (local_rank: 0)", "1:   ValueError: rank 1 was told to fail"]


@needs_root_on_linux
def test_a_failing_rank_gives_one_labelled_summary_per_node_the_earliest_its_own(slurm, tmp_path):
    with slurm_cluster() as cluster:
        script = Path(cluster.workdir) / "fail.sbatch"
        script.write_text(FAILING_JOB)
        job = cluster.sbatch(str(script), env={"PYTHON": sys.executable})
    assert job.returncode != 0
    causes = root_causes(job.output)
    assert sorted((c.label, c.host) for c in causes) == [("0", "node0"), ("1", "node1")], job.output[-3000:]
    first = min(causes, key=lambda c: c.time)
    assert (first.host, first.error) == ("node1", "ValueError: rank 1 was told to fail")
    assert "Connection closed by peer" in next(c.error for c in causes if c.host == "node0")
