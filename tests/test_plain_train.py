"""Lesson 09's plain train.py runs under torchrun on 2 CPU ranks, logs one global loss per epoch
and the held-out accuracy from rank 0, leaves rank 0's checkpoint, and resumes from it exactly."""

import subprocess
import sys
from pathlib import Path

from conftest import run_launcher, torch_aborted_at_exit

SCRIPT = Path(__file__).resolve().parent.parent / "ddp_lib" / "demos" / "plain_train.py"


def _run(cwd: Path, *options: str) -> subprocess.CompletedProcess:
    torchrun = Path(sys.executable).with_name("torchrun")
    for attempt in range(2):
        done = run_launcher([str(torchrun), "--nproc-per-node", "2", str(SCRIPT), *options], cwd=cwd,
                            timeout=180)
        # torch's own abort at exit, once the checkpoint is saved, is tried once more; any other
        # failure, or the abort twice, fails the test.
        if not (torch_aborted_at_exit(done.stderr) and (cwd / "checkpoint.pt").exists() and attempt == 0):
            break
        (cwd / "checkpoint.pt").unlink()
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stdout.splitlines() if line.startswith(("epoch ", "held-out accuracy"))]


def test_plain_train_runs_under_torchrun_and_resumes_exactly(tmp_path):
    unbroken, broken = tmp_path / "unbroken", tmp_path / "broken"
    unbroken.mkdir()
    broken.mkdir()
    lines = _lines(_run(unbroken))
    assert [line.split(":")[0] for line in lines[:3]] == ["epoch 0", "epoch 1", "epoch 2"]
    assert lines[3].startswith("held-out accuracy ") and len(lines) == 4
    assert float(lines[2].split()[-1]) < float(lines[0].split()[-1])  # the loss falls
    assert float(lines[3].split()[-1]) > 0.75  # it learns: chance is 0.5
    assert (unbroken / "checkpoint.pt").exists()
    first = _lines(_run(broken, "--epochs", "2"))
    resumed = _lines(_run(broken, "--resume"))
    assert first[:2] == lines[:2]
    assert resumed == lines[2:]  # epoch 2 and the accuracy, as in the unbroken run
