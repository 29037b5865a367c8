"""Lesson 05's diff_loop: the plain-torch loop of the lesson's diff runs on real ranks and trains as train does."""

import torch

from ddp_lib.demos.diff_loop import diff_loop
from ddp_lib.launch import launch
from ddp_lib.workers.train import train


def test_diff_loop_runs_prints_on_rank_0_saves_and_matches_train(tmp_path):
    job = launch(diff_loop, 2, kwargs=dict(epochs=2, checkpoint=str(tmp_path / "last.pt")), show_output=False)
    assert job.results[0] == job.results[1]  # the all-reduced losses
    assert job.stdout[0].splitlines() == [f"epoch {e + 1}: loss {v:.4f}" for e, v in enumerate(job.results[0])]
    assert job.stdout[1] == ""
    saved = torch.load(tmp_path / "last.pt")  # model, optimizer and epoch: enough to resume
    assert sorted(saved) == ["epoch", "model", "optimizer"] and saved["epoch"] == 2
    assert saved["optimizer"]["state"]  # the momentum buffers
    reference = launch(train, 2, kwargs=dict(epochs=2, batch_size=16, lr=0.1), show_output=False).results[0]
    assert all(abs(a - b) < 1e-5 for a, b in zip(job.results[0], reference["losses"]))


def test_diff_loop_progress_bar_on_rank_0_only_changes_nothing(tmp_path):
    plain = launch(diff_loop, 2, kwargs=dict(epochs=1, checkpoint=str(tmp_path / "a.pt")), show_output=False)
    bar = launch(diff_loop, 2, kwargs=dict(epochs=1, checkpoint=str(tmp_path / "b.pt"), progress=True),
                 show_output=False)
    assert "16/16" in bar.stderr[0] and bar.stderr[1] == ""  # 256 samples per rank, 16 per batch
    assert bar.results == plain.results
