"""Checkpoints in a directory that is not this run's alone: another run's files, another job
saving at the same time, a file that holds more than tensors. The guards are the lesson's
(``ddp_lib.demos.training_runs``), not the copied file's: a job a learner copies owns its directory."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from ddp_lib.demos.training_runs import read_checkpoint, save_epoch_checkpoint
from ddp_lib.workers.train import list_checkpoints


def test_keep_last_never_deletes_what_this_run_just_wrote(tmp_path):
    d = str(tmp_path)
    for epoch in (9, 10):  # an earlier, longer run's last checkpoints
        save_epoch_checkpoint(d, epoch, {"epoch": epoch, "run": "old"})
    for epoch in (1, 2, 3):
        with pytest.warns(UserWarning, match=r"also holds epoch_009.pt, epoch_010.pt, later than epoch \d saved now"):
            path = save_epoch_checkpoint(d, epoch, {"epoch": epoch, "run": "new"}, keep_last=2)
        assert read_checkpoint(path) == {"epoch": epoch, "run": "new"}  # still there after pruning
    assert list_checkpoints(d) == ["epoch_002.pt", "epoch_003.pt", "epoch_009.pt", "epoch_010.pt"]


def test_keep_last_keeps_the_newest_up_to_this_save(tmp_path):
    for epoch in range(1, 6):
        save_epoch_checkpoint(str(tmp_path), epoch, {"epoch": epoch}, keep_last=2)
    assert list_checkpoints(str(tmp_path)) == ["epoch_004.pt", "epoch_005.pt"]


def test_a_save_in_progress_of_another_live_process_is_left_alone_and_named(tmp_path):
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            in_progress = tmp_path / f".epoch_{other.pid}_abc.tmp"
            in_progress.write_bytes(b"half a checkpoint")
            crashed = tmp_path / ".epoch_999999999_def.tmp"  # no such process: a crashed save's leftover
            crashed.write_bytes(b"")
            with pytest.warns(UserWarning, match=rf"process {other.pid} is saving a checkpoint into .* two jobs share"):
                save_epoch_checkpoint(str(tmp_path), 1, {"epoch": 1})
            assert in_progress.exists() and not crashed.exists()
        finally:
            other.kill()


def test_two_jobs_saving_into_one_directory_both_finish(tmp_path):
    saver = textwrap.dedent(f"""
        import torch, warnings
        from ddp_lib.demos.training_runs import save_epoch_checkpoint
        warnings.simplefilter("ignore")
        for epoch in range(1, 41):
            save_epoch_checkpoint({str(tmp_path)!r}, epoch, {{"epoch": epoch, "w": torch.ones(20000)}})
    """)
    jobs = [subprocess.Popen([sys.executable, "-c", saver], stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [job.communicate(timeout=120)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], errors
    assert len(list_checkpoints(str(tmp_path))) == 40


def test_a_checkpoint_holding_objects_is_refused_saying_why(tmp_path):
    path = str(tmp_path / "epoch_001.pt")
    torch.save({"epoch": 1, "args": argparse.Namespace(lr=0.1)}, path)
    with pytest.raises(RuntimeError) as info:
        read_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"checkpoint {path} holds objects other than tensors")
    assert "truncated" not in message and "weights_only=False" not in message
    assert re.search(r"would call whatever functions the file names", message)
    assert os.path.exists(path)
