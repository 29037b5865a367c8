"""slurm/train.sbatch run for real: a one-machine SLURM cluster (slurmctld, a slurmd on each of two
hosts in network namespaces, munge) runs the training job on two nodes, one torchrun per node, and
gives the one-machine result; afterwards no daemon, namespace or munge key is left. Needs root on
Linux; SLURM is installed from apt when missing (set DDP_LIB_NO_APT=1 to skip instead)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddp_lib.cluster.hosts import left_behind
from ddp_lib.cluster.hosts import unavailable as hosts_unavailable
from ddp_lib.cluster.slurm import DAEMONS, MACHINE_MUNGE_KEY, install_packages, slurm_cluster, unavailable, unlabel
from ddp_lib.launch import spawn
from ddp_lib.torchrun import parse_results
from ddp_lib.workers.train import train

SCRIPT = Path(__file__).resolve().parents[1] / "slurm" / "train.sbatch"

needs_root_on_linux = pytest.mark.skipif(
    hosts_unavailable() is not None, reason=f"a one-machine SLURM cluster needs two hosts: {hosts_unavailable()}")


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


def test_unlabel_joins_the_pieces_of_long_lines_per_task():
    long = "x" * 1500
    output = f"nodes: a b\n0: {long[:1024]}\n1: short\n0: {long[1024:]}\n0: next\n"
    assert unlabel(output) == ("nodes: a b", {0: f"{long}\nnext", 1: "short"})


def test_sbatch_script_has_the_slurm_mapping():
    text = SCRIPT.read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                 '--rdzv-endpoint="$head:$RDZV_PORT"', '--rdzv-id="$SLURM_JOB_ID"',
                 'srun --label --cpus-per-task="$SLURM_CPUS_PER_TASK" "$PYTHON" -m torch.distributed.run',
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
    own, tasks = unlabel(job.output)
    assert own.splitlines()[0] == "nodes: node0 node1 | rendezvous: node0:29400"
    assert sorted(tasks) == [0, 1]
    results, lines = parse_results("\n".join(tasks.values()))
    assert [r["rank"] for r in results] == [0, 1]
    reference = spawn(train, 2, args=(3, 16, 0.1, 0), show_output=False)
    for got, want in zip(results, reference):
        assert got["losses"] == want["losses"]
        assert got["checksum"] == pytest.approx(want["checksum"], abs=1e-6)
        assert (torch.tensor(got["params"]) - torch.tensor(want["params"])).abs().max().item() < 1e-6
    assert [line for line in lines if line.startswith("epoch ")][-1].startswith("epoch  3/3 [####################]")
    # Nothing left: daemons, namespaces, links, the machine-wide munge key.
    assert ours & daemon_pids() == set()
    assert left_behind(os.getpid()) == []
    assert os.path.exists(MACHINE_MUNGE_KEY) == key_before
