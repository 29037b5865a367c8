"""Lesson 08's gradient_as_bucket_view run: with the flag the gradients are views into the bucket,
without it they are not, every round is timed, and the kept run has what the lesson reads."""

from ddp_lib.demos import bucket_view
from ddp_lib.launch import run_ranks


def test_bucket_view_steps_views_and_rounds():
    results = run_ranks(bucket_view.bucket_view_steps, 2, kwargs=dict(rounds=2), show_output=False)
    for r in results:
        assert r["views"] == {"DDP, copies": False, "DDP, views": True, "DDP, views kept": True}
        assert all(len(times) == 2 for times in r["step_ms"].values())
    assert results[0]["step_ms"] == results[1]["step_ms"]  # each round's slowest rank, on both


def test_kept_run_has_paired_rounds():
    kept = bucket_view.kept_run()
    assert kept["views"] == {"DDP, copies": False, "DDP, views": True, "DDP, views kept": True}
    assert len({len(times) for times in kept["step_ms"].values()}) == 1
    assert len(kept["step_ms"]["local"]) >= 9


def test_views_skip_the_copy_in_only_when_zero_grad_keeps_them():
    counts = run_ranks(bucket_view.copies_in_backward, 1, show_output=False)[0]
    assert counts == {"copies": {"into the bucket": 4, "back to p.grad": 4},
                      "views, zero_grad()": {"into the bucket": 4, "back to p.grad": 0},
                      "views, zero_grad(set_to_none=False)": {"into the bucket": 0, "back to p.grad": 0}}
