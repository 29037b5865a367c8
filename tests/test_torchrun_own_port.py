"""ddp_lib.demos.torchrun_own_port (lesson 06): the DDP tutorial's setup(), with its own MASTER_PORT,
kept under torchrun. torchrun's agent runs the ranks' store elsewhere, so the ranks dial a port where
nothing listens, and init_process_group fails at the group's timeout."""

import socket
import subprocess
import sys

import pytest

from ddp_lib.demos import torchrun_batch, torchrun_own_port

COMMAND = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           "-m", "ddp_lib.demos.torchrun_own_port"]


def _port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("localhost", port)) != 0


def test_the_lesson_starts_it_in_the_background():
    assert torchrun_batch.MAIN_JOBS["own_port"].endswith("-m ddp_lib.demos.torchrun_own_port")
    assert torchrun_own_port.TIMEOUT_S == 3


def test_a_port_of_your_own_under_torchrun_times_out():
    if not _port_is_free(12355):
        pytest.skip("another process listens on 12355 now")
    job = subprocess.run(COMMAND, capture_output=True, text=True, timeout=180)
    assert job.returncode == 1, job.stderr[-2000:]
    assert ("DistNetworkError: The client socket has timed out after 3000ms while trying to connect to"
            " (localhost, 12355)") in job.stderr, job.stderr[-2000:]
    assert "torchrun_own_port FAILED" in job.stderr  # torchrun's failure summary
