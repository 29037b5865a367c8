"""`make gpu-check` (tools/gpu_check.py): on a machine with fewer than 2 GPUs, one line and exit 0."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() >= 2, reason="runs the GPU cases")
def test_without_two_gpus_it_says_in_one_line_that_there_is_nothing_to_run():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()] and done.stdout.strip().endswith("nothing to run")
