"""Lesson 09's exercise 3 checker, on one process: the order of a GradScaler's calls."""

import textwrap

import pytest
from answer_files import notebook_stub

from ddp_lib.exercises import lesson09

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
