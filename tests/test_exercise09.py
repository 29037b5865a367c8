"""Lesson 09's exercise 3 checker, on one process: the order of a GradScaler's calls."""

import textwrap

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


def test_no_unscale_at_all_is_named_as_clipping_scaled_gradients(tmp_path, monkeypatch):
    source = RIGHT.replace("    scaler.unscale_(optimizer)\n", "")
    report = _check(tmp_path, monkeypatch, "nounscale09", source)
    assert "unscale_(optimizer) before clip_grad_norm_" in report, report


def test_optimizer_step_is_named(tmp_path, monkeypatch):
    source = RIGHT.replace("scaler.step(optimizer)", "optimizer.step()")
    report = _check(tmp_path, monkeypatch, "optstep09", source)
    assert report.startswith("FAIL") and "scaler.step(optimizer)" in report, report


def test_a_missing_update_is_named(tmp_path, monkeypatch):
    source = RIGHT.replace("    scaler.update()\n", "")
    report = _check(tmp_path, monkeypatch, "noupdate09", source)
    assert report.startswith("FAIL") and "scaler.update()" in report, report


def test_a_missing_clip_is_named(tmp_path, monkeypatch):
    source = RIGHT.replace("    nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", "")
    report = _check(tmp_path, monkeypatch, "noclip09", source)
    assert report.startswith("FAIL") and "unclipped" in report, report


def test_an_unscaled_backward_is_named(tmp_path, monkeypatch):
    source = RIGHT.replace("scaler.scale(loss).backward()", "loss.backward()")
    report = _check(tmp_path, monkeypatch, "unscaled09", source)
    assert report.startswith("FAIL") and "scaler.scale(loss)" in report, report
