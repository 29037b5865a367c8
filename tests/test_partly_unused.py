"""Lesson 04's head used by rank 1 only: without find_unused_parameters rank 0's next forward raises
and rank 1 waits in backward() until the group's timeout;
with it, every rank holds half of rank 1's own gradient (rank 0 sends zeros for the head)."""

import pytest

from ddp_lib.demos import partly_unused
from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks


def test_without_the_flag_rank_0_raises_at_its_next_forward_and_rank_1_waits_in_backward_until_the_timeout():
    with pytest.raises(WorkerError) as info:
        run_ranks(partly_unused.head_used_by_rank_1, 2, kwargs=dict(find_unused_parameters=False, timeout_s=2.0),
                  show_output=False)
    assert "Expected to have finished reduction in the prior iteration" in info.value.outputs[0][0]
    assert info.value.rank == 1
    assert "Timed out" in info.value.failures[1]
    assert "loss.backward()" in info.value.tracebacks[1]


def test_with_the_flag_every_rank_holds_half_of_rank_1s_gradient():
    results = run_ranks(partly_unused.head_used_by_rank_1, 2, kwargs=dict(find_unused_parameters=True),
                        show_output=False)
    assert [r["uses_b"] for r in results] == [False, True]
    assert results[0]["own"] is None
    half = [v / 2 for v in results[1]["own"]]
    for r in results:
        assert r["after_ddp"] == pytest.approx(half, abs=1e-3)
