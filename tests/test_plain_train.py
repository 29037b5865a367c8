"""Lesson 09's plain train.py runs under torchrun on 2 CPU ranks, logs one global loss per epoch
from rank 0, and leaves rank 0's checkpoint."""

import subprocess
import sys
from pathlib import Path

from conftest import torch_aborted_at_exit

SCRIPT = Path(__file__).resolve().parent.parent / "ddp_lib" / "demos" / "plain_train.py"


def test_plain_train_runs_under_torchrun(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    for attempt in range(2):
        done = subprocess.run([str(torchrun), "--nproc-per-node", "2", str(SCRIPT)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=180)
        # torch's own abort at exit, once the checkpoint is saved, is tried once more; any other
        # failure, or the abort twice, fails the test.
        if not (torch_aborted_at_exit(done.stderr) and (tmp_path / "checkpoint.pt").exists() and attempt == 0):
            break
        (tmp_path / "checkpoint.pt").unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    epochs = [line for line in done.stdout.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["epoch 0", "epoch 1", "epoch 2"]
    assert (tmp_path / "checkpoint.pt").exists()
