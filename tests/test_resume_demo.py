"""Lesson 09's save-and-resume demo: a resumed run continues the unbroken run's losses."""

import pytest

from ddp_lib.demos.resume import train_then_resume
from ddp_lib.launch import run_ranks


def test_resumed_losses_continue_the_unbroken_run(tmp_path):
    results = run_ranks(train_then_resume, 2, kwargs=dict(directory=str(tmp_path)), show_output=False)
    for r in results:
        assert r["resumed"] == r["unbroken"]
        assert len(r["unbroken"]) == 6
        assert r["no_optimizer_state"][:4] == r["unbroken"][:4]  # the first loss after loading precedes any update
        assert r["no_optimizer_state"][4:] != r["unbroken"][4:]  # without Adam's state the curve departs
        # warm-up to 0.005 * sqrt(32 / 16), the square-root rule for Adam, resumed
        assert r["lrs"] == [0.001768, 0.003536, 0.005303, 0.007071, 0.007071, 0.007071]
    assert results[0]["unbroken"] == results[1]["unbroken"]  # the global mean, the same on every rank
    contents = results[0]["contents"]
    assert sorted(contents) == ["model", "next_step", "optimizer", "scaler", "scheduler"]
    assert contents["optimizer"] == ["param_groups", "state"]
    assert contents["next_step"] == 3
    assert results[0]["wrapper_key"] == "module." + results[0]["module_key"]


def test_save_at_outside_the_run_is_refused(tmp_path):
    with pytest.raises(ValueError, match="save_at must lie between 0 and steps=6"):
        train_then_resume(0, 1, str(tmp_path), save_at=6)
