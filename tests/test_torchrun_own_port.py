"""ddp_lib.demos.torchrun_own_port (lesson 06): the DDP tutorial's setup(), with its own MASTER_PORT,
kept under torchrun. torchrun's agent runs the ranks' store elsewhere, so the ranks dial a port where
nothing listens, and init_process_group fails at the group's timeout."""

import os
import re
import subprocess
import sys

from ddp_lib.demos import torchrun_batch, torchrun_own_port
from ddp_lib.process_group import free_port

COMMAND = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
           "-m", "ddp_lib.demos.torchrun_own_port"]


def test_the_lesson_starts_it_in_the_background():
    assert torchrun_batch.MAIN_JOBS["own_port"].endswith("-m ddp_lib.demos.torchrun_own_port")
    assert torchrun_own_port.TIMEOUT_S == 1


def test_a_port_of_your_own_under_torchrun_times_out():
    port = free_port()  # the tutorial's 12355 may be held by another job on this machine
    job = subprocess.run(COMMAND, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "TUTORIAL_PORT": str(port)})
    assert job.returncode == 1, job.stderr[-2000:]
    assert ("DistNetworkError: The client socket has timed out after 1000ms while trying to connect to"
            f" (localhost, {port})") in job.stderr, job.stderr[-2000:]
    assert "torchrun_own_port FAILED" in job.stderr  # torchrun's failure summary
    # torch 2.13's store client tries again after a "retrying" warning, until a try ends past its deadline
    tries = re.findall(r"connect/validate to host \S+ - (retrying|timed out) \(try=(\d+)", job.stderr)
    assert tries[0] == ("retrying", "0") and tries[-1][0] == "timed out", job.stderr[-2000:]
    assert [int(n) for _, n in tries] == list(range(len(tries))) and len(tries) >= 2, tries



def test_the_lesson_runs_it_on_the_tutorials_port():
    env = {k: v for k, v in os.environ.items() if k != "TUTORIAL_PORT"}
    code = "from ddp_lib.demos import torchrun_own_port as m; print(m.TUTORIAL_PORT)"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "12355\n"
    assert "TUTORIAL_PORT" not in torchrun_batch.MAIN_JOBS["own_port"]


def test_shown_is_the_two_functions_without_the_module_around_them():
    shown = torchrun_own_port.shown()
    assert shown.startswith("def setup(") and "def main() -> None:" in shown
    assert shown.rstrip().endswith("dist.destroy_process_group()  # not reached under torchrun")
    assert "__main__" not in shown and "TIMEOUT_S = 1" not in shown
