"""Lesson 05's side demos: evaluation on rank 0 alone, and what Join runs."""

from __future__ import annotations

import pytest

from ddp_lib.errors import WorkerError
from ddp_lib.launch import spawn
from ddp_lib.workers.train_demos import rank0_evaluation, uneven_batches


def test_rank0_evaluation_works_through_module_and_times_out_through_the_wrapper():
    results = spawn(rank0_evaluation, 2, kwargs=dict(through="module"), show_output=False)
    assert results[0]["accuracy"] is not None and results[1]["accuracy"] is None
    with pytest.raises(WorkerError) as info:
        spawn(rank0_evaluation, 2, kwargs=dict(through="wrapper", timeout_s=2.0), show_output=False, timeout=60)
    # gloo words it "Timed out waiting ..." or "Application timeout caused pair closure"
    assert any(words in info.value.failures[0].lower() for words in ("timed out", "timeout"))


def test_join_shadows_the_allreduces_and_broadcasts_the_last_model():
    short, long = spawn(uneven_batches, 2, kwargs=dict(use_join=1), show_output=False)
    assert (short["steps"], long["steps"]) == (2, 4)
    assert short["collectives"]["allreduce_"] == long["collectives"]["allreduce_"]
    # The final broadcast changed the short rank's model after its last own step.
    assert short["checksums"][-1] != short["checksum"] == long["checksum"]
