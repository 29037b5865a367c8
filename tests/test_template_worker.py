"""The template worker (ddp_lib/workers/template.py), copied alone into an empty directory where
ddp_lib cannot be imported by it, runs as a learner runs it: ``python template.py`` (mp.spawn),
``torchrun template.py``, and ddp_lib's launcher (``python -m ddp_lib run mine:train`` runs the
edited copy mine.py, not ddp_lib's template). A job stopped after 2 epochs and resumed under another
launcher ends where an uninterrupted one does; a resume with other settings or nothing left says so."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import ddp_lib
from ddp_lib.process_group import free_port

TEMPLATE = pathlib.Path(ddp_lib.__file__).resolve().parent / "workers" / "template.py"
TORCHRUN = pathlib.Path(sys.executable).with_name("torchrun")
EVAL_SAMPLES = 201  # the template's evaluation set: odd, so 2 ranks cannot split it evenly


def _run(command: list[str], cwd: pathlib.Path, env: dict | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "PYTHONPATH")}
    proc = subprocess.run(command, cwd=cwd, env={**base, "MASTER_PORT": str(free_port()), **(env or {})},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("own_project")
    shutil.copy(TEMPLATE, root / "template.py")
    return root


def _state(path: pathlib.Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_the_template_runs_and_resumes_under_mp_spawn_torchrun_and_ddp_lib(project):
    # Uninterrupted, as `python template.py` starts it: mp.spawn, 2 ranks, 4 epochs.
    straight = _run([sys.executable, "-I", "template.py", "--epochs", "4", "--checkpoint-dir", "straight"], project)
    assert len(re.findall(r"^epoch \d/4:", straight, re.MULTILINE)) == 4, straight

    # Stopped after 2 epochs under ddp_lib's launcher, run as the learner runs an edited, renamed
    # copy (the edit shows the launcher ran the file in this directory), resumed to 4 under torchrun.
    edited = (project / "template.py").read_text().replace('print(f"epoch {', 'print(f"edited copy, epoch {')
    assert "edited copy" in edited
    (project / "mine.py").write_text(edited)
    launched = _run([sys.executable, "-m", "ddp_lib", "run", "mine:train", "--world-size", "2", "--epochs", "2",
                     "--checkpoint-dir", "resumed"], project)
    assert "edited copy, epoch 2/2" in launched, launched
    assert _state(project / "resumed" / "last.pt")["epoch"] == 2
    resumed = _run([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "template.py", "--epochs", "4",
                    "--checkpoint-dir", "resumed"], project)
    assert "resuming from resumed/last.pt: 2 epochs done" in resumed, resumed
    assert "epoch 1/4" not in resumed and "epoch 3/4" in resumed, resumed
    assert "was written with" not in resumed, resumed

    a, b = _state(project / "straight" / "last.pt"), _state(project / "resumed" / "last.pt")
    assert a["epoch"] == b["epoch"] == 4
    assert [h["evaluated"] for h in a["history"]] == [EVAL_SAMPLES] * 4  # each sample counted once
    assert a["history"][-1]["accuracy"] > 0.9  # it learns
    for x, y in zip(a["history"], b["history"]):
        assert x == pytest.approx(y, abs=1e-6)
    for name, tensor in a["model"].items():
        assert torch.allclose(tensor, b["model"][name], atol=1e-6), name
    assert not list((project / "resumed").glob("*.tmp"))  # the temporary file was renamed into place

    # Run again with another lr and no more epochs: a warning, and no silent "resumed".
    again = _run([sys.executable, "-I", "template.py", "--epochs", "4", "--lr", "0.1", "--checkpoint-dir", "resumed"],
                 project)
    assert "was written with" in again and "'lr': 0.05" in again, again
    assert "nothing left to train" in again and "epoch 4/4" not in again, again
