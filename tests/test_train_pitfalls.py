"""Lesson 05's side demos: evaluation on rank 0 alone, and what Join runs."""

from __future__ import annotations

import pytest

from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.workers.train_pitfalls import rank0_evaluation, stop_together, uneven_batches


def test_rank0_evaluation_works_through_module_and_times_out_through_the_wrapper():
    results = run_ranks(rank0_evaluation, 2, kwargs=dict(through="module"), show_output=False)
    assert results[0]["accuracy"] is not None and results[1]["accuracy"] is None
    with pytest.raises(WorkerError) as info:
        run_ranks(rank0_evaluation, 2, kwargs=dict(through="wrapper", timeout_s=2.0), show_output=False, timeout=60)
    # gloo words it "Timed out waiting ..." or "Application timeout caused pair closure", on the rank
    # whose timer runs out first (under load, the other may see the closed pair instead)
    messages = [message.lower() for message in info.value.failures.values()]
    assert any("timed out" in message or "timeout" in message for message in messages)


def test_join_shadows_the_collectives_and_broadcasts_the_last_model():
    short, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1), show_output=False)
    assert (short["steps"], long["steps"]) == (2, 4)
    # Three all-reduces per step of the long rank on both ranks (the short one shadows steps 3 and 4
    # in Join's exit), two broadcasts where DDP rebuilds its buckets, one for the final model.
    for rank in (short, long):
        assert sum(c.get("allreduce_", 0) for c in rank["collectives"].values()) == 14, rank["collectives"]
        assert rank["collectives"]["step 2"] == {"allreduce_": 3, "broadcast_": 2}
        assert rank["collectives"]["Join's exit"]["broadcast_"] == 1
    assert short["collectives"]["Join's exit"]["allreduce_"] == 8
    assert long["collectives"]["Join's exit"]["allreduce_"] == 2
    # The final broadcast changed the short rank's model after its last own step.
    assert short["checksums"][-1] != short["checksum"] == long["checksum"]
    # Alone, the long rank's gradient is its own divided by the initial world size...
    assert long["grad_ratio"][2:] == [0.5, 0.5]
    # ...or by the ranks still training.
    _, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1, divide_by_initial_world_size=False),
                        show_output=False)
    assert long["grad_ratio"][2:] == [1.0, 1.0]


def test_join_copies_the_buffers_only_when_forward_sync_buffers_is_on():
    # Join's end broadcasts the last rank's parameters, and its buffers only under forward_sync_buffers=True
    # (DDP's _sync_final_model passes broadcast_buffers=self.forward_sync_buffers).
    for forward_sync_buffers, buffers_equal in ((True, True), (False, False)):
        short, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1, norm="batch",
                                                               forward_sync_buffers=forward_sync_buffers),
                                show_output=False)
        assert short["checksum"] == long["checksum"]
        assert (short["buffers"] == long["buffers"]) is buffers_equal, (short["buffers"], long["buffers"])
    short, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1), show_output=False)
    assert short["buffers"] == long["buffers"] == 0  # MoonsNet without batch norm has no buffers


def test_join_syncs_the_parameters_but_not_the_momentum():
    short, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1, momentum=0.9, steps_after=1),
                            show_output=False)
    # Join's final broadcast makes the parameters equal at the block's end...
    assert short["checksum"] == long["checksum"]
    # ...but each rank keeps its own momentum, so one more (all-reduced) step sets them apart.
    assert len(short["checksums_after"]) == len(long["checksums_after"]) == 1
    assert short["checksums_after"] != long["checksums_after"]
    # Without momentum the same extra step keeps them equal.
    short, long = run_ranks(uneven_batches, 2, kwargs=dict(use_join=1, steps_after=1), show_output=False)
    assert short["checksums_after"] == long["checksums_after"]


def test_stop_together_agrees_with_a_broadcast_and_fails_without_one():
    ranks = run_ranks(stop_together, 2, kwargs=dict(agree=True), show_output=False)
    assert ranks[0]["steps"] == ranks[1]["steps"] < 16  # 512 samples / (2 ranks x 16): 16 steps at most
    with pytest.raises(WorkerError, match="closed|reset|Read error|Timed out") as failed:
        run_ranks(stop_together, 2, kwargs=dict(agree=False, timeout_s=2.0), show_output=False)
    assert failed.value.rank == 1  # rank 0 stopped alone; rank 1's next all-reduce lost its partner
