"""Lesson 10's GradScaler under FSDP2: one rank's overflow makes every rank skip the step."""

from ddp_lib.demos.fsdp_scaler import overflow_in_one_shard
from ddp_lib.launch import run_ranks


def test_overflow_in_rank_0s_shard_skips_the_step_on_every_rank():
    results = run_ranks(overflow_in_one_shard, 2, show_output=False)
    assert [r["own_shard_finite"] for r in results] == [False, True]
    assert not any(r["stepped"] for r in results)
    assert all(r["scale_after"] == r["scale_before"] / 2 for r in results)


def test_without_overflow_every_rank_steps():
    results = run_ranks(overflow_in_one_shard, 2, kwargs=dict(inject=False), show_output=False)
    assert all(r["own_shard_finite"] and r["stepped"] for r in results)
    assert all(r["scale_after"] == r["scale_before"] for r in results)
