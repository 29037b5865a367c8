"""Lesson 09's exercise 3 and 4 checkers, on one process: the order of a GradScaler's calls, and the mean
of the ranks' accuracies."""

import textwrap

import pytest
from answer_files import notebook_stub

from ddp_lib.exercises import lesson09
from ddp_lib.exercises.solutions import lesson09 as solutions

SCALED_STEP_STUB = notebook_stub("09_training_loop.ipynb", "my_work/lesson09_scaled_step.py")


def _check(tmp_path, monkeypatch, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return str(lesson09.check_scaled_step(__import__(name).scaled_step))


RIGHT = textwrap.dedent("""\
    from torch import nn


    def scaled_step(loss, model, optimizer, scaler, max_norm):
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
    """)

RIGHT_WRITTEN_OTHERWISE = """\
    import torch


    def scaled_step(loss, model, optimizer, scaler, max_norm):
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm)
        scaler.step(optimizer)
        scaler.update()
    """


def test_two_right_orders_pass(tmp_path, monkeypatch):
    for name, source in (("right09_a", RIGHT), ("right09_b", RIGHT_WRITTEN_OTHERWISE)):
        report = _check(tmp_path, monkeypatch, name, source)
        assert report.startswith("PASS") and "FAIL" not in report, report


def test_the_stub_clips_before_unscaling(tmp_path, monkeypatch):
    report = _check(tmp_path, monkeypatch, "stub09_scaled", SCALED_STEP_STUB)
    assert report.startswith("FAIL") and "unscale_(optimizer) before clip_grad_norm_" in report, report


MISTAKES = {  # name: (the line of RIGHT changed, what it becomes, what the report must name)
    "no_unscale": ("    scaler.unscale_(optimizer)\n", "", "unscale_(optimizer) before clip_grad_norm_"),
    "optimizer_step": ("scaler.step(optimizer)", "optimizer.step()", "scaler.step(optimizer)"),
    "no_update": ("    scaler.update()\n", "", "scaler.update()"),
    "no_clip": ("    nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", "", "unclipped"),
    "unscaled_backward": ("scaler.scale(loss).backward()", "loss.backward()", "scaler.scale(loss)"),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_fails_and_is_named(mistake, tmp_path, monkeypatch):
    old, new, named = MISTAKES[mistake]
    assert old in RIGHT
    report = _check(tmp_path, monkeypatch, f"mistake09_{mistake}", RIGHT.replace(old, new))
    assert report.startswith("FAIL") and named in report, report


# Exercise 4: the mean of the ranks' accuracies, on one process.
RANK_MEAN_STUB = notebook_stub("09_training_loop.ipynb", "my_work/lesson09_rank_mean.py")

RANK_MEAN_RIGHT = textwrap.dedent("""\
    from torch.utils.data import DistributedSampler


    def rank_mean(right, world_size):
        accuracies = []
        for rank in range(world_size):
            shard = list(DistributedSampler(range(len(right)), world_size, rank, shuffle=False))
            accuracies.append(right[shard].float().mean())
        return sum(accuracies) / world_size
    """)

RANK_MEAN_RIGHT_WRITTEN_OTHERWISE = """\
    import torch


    def rank_mean(right, world_size):
        n = len(right)
        per_rank = -(-n // world_size)
        padded = list(range(n)) + list(range(n))[:per_rank * world_size - n]
        return torch.stack([right[padded[rank::world_size]].double().mean() for rank in range(world_size)]).mean()
    """


def _check_mean(tmp_path, monkeypatch, name, source):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return str(lesson09.check_rank_mean(__import__(name).rank_mean))


def test_two_right_means_pass(tmp_path, monkeypatch):
    for name, source in (("mean09_a", RANK_MEAN_RIGHT), ("mean09_b", RANK_MEAN_RIGHT_WRITTEN_OTHERWISE)):
        report = _check_mean(tmp_path, monkeypatch, name, source)
        assert report.startswith("PASS") and "FAIL" not in report, report


def test_the_worked_rank_mean_passes():
    assert lesson09.check_rank_mean(solutions.rank_mean).passed


def test_the_rank_mean_stub_is_the_exact_accuracy(tmp_path, monkeypatch):
    report = _check_mean(tmp_path, monkeypatch, "stub09_mean", RANK_MEAN_STUB)
    fails = [line for line in report.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 1 and "exact accuracy" in fails[0], report


SHARD = "        shard = list(DistributedSampler(range(len(right)), world_size, rank, shuffle=False))\n"
MEAN_MISTAKES = {  # name: (the line of RANK_MEAN_RIGHT changed, what it becomes, what the report must name)
    "no_padding": (SHARD, "        shard = list(range(rank, len(right), world_size))\n", "leaves out the padding"),
    "drop_last": ("shuffle=False)", "shuffle=False, drop_last=True)", "drop_last=False"),
    "blocks": (SHARD, "        size = -(-len(right) // world_size)\n"
                      "        shard = list(range(rank * size, min((rank + 1) * size, len(right))))\n",
               "consecutive blocks"),
    "not_a_number": ("return sum(accuracies) / world_size", "return accuracies", "as a float"),
    "wrong_divisor": ("/ world_size", "/ len(right)", "compute each rank's accuracy"),
}


@pytest.mark.parametrize("mistake", sorted(MEAN_MISTAKES))
def test_each_rank_mean_mistake_fails_and_is_named(mistake, tmp_path, monkeypatch):
    old, new, named = MEAN_MISTAKES[mistake]
    assert old in RANK_MEAN_RIGHT
    report = _check_mean(tmp_path, monkeypatch, f"mean09_{mistake}", RANK_MEAN_RIGHT.replace(old, new))
    assert report.startswith("FAIL") and named in report, report
