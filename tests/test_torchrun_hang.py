"""ddp_lib.demos.torchrun_hang (lesson 06): a real torchrun whose rank 1 hangs; rank 0's group timeout
ends the wait, and torchrun restarts the ranks once."""

import os
import subprocess
import sys

COMMAND = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--max-restarts=1", "-m", "ddp_lib.demos.torchrun_hang"]


def run_hang_job(tmp_path, late_rank_1_s: float = 0.0) -> subprocess.CompletedProcess:
    """The lesson's hang job, as its setup cell runs it. With ``late_rank_1_s``, rank 1 starts that
    many seconds late on attempt 0 (a sitecustomize module sleeps first), as on a busy machine."""
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    if late_rank_1_s:
        (tmp_path / "sitecustomize.py").write_text(
            "import os, time\n"
            "if os.environ.get('RANK') == '1' and os.environ.get('TORCHELASTIC_RESTART_COUNT') == '0':\n"
            f"    time.sleep({late_rank_1_s})\n")
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    return subprocess.run(COMMAND, env=env, capture_output=True, text=True, timeout=180)


def test_the_group_timeout_ends_the_hang_and_torchrun_restarts(tmp_path):
    job = run_hang_job(tmp_path)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "attempt 0, rank 0: the barrier waited at least 1 s, then raised RuntimeError" in job.stdout, job.stdout
    assert "attempt 1, rank 0: started again" in job.stdout, job.stdout
    assert "closing signal SIGTERM" in job.stderr  # the agent stopped the sleeping rank 1


def test_a_rank_that_starts_late_does_not_fail_init(tmp_path):
    # rank 1 comes 2.5 s late: only the barrier's group has the 1-s timeout, so init waits for it
    job = run_hang_job(tmp_path, late_rank_1_s=2.5)
    assert job.returncode == 0, job.stderr[-2000:]
    assert "attempt 0, rank 0: the barrier waited at least 1 s" in job.stdout, job.stdout + job.stderr[-2000:]
