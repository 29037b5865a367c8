"""Lesson 10's zero_consolidate: after consolidate_state_dict(to=0), rank 0's state_dict holds Adam's
state for every parameter, and the other rank's state_dict raises; get_state_dict, before it, raises on
every rank."""

from ddp_lib.demos.zero_consolidate import consolidated_state
from ddp_lib.launch import run_ranks


def test_rank_0_saves_the_whole_state():
    rank0, rank1 = run_ranks(consolidated_state, 2, show_output=False)
    assert rank0["own_state"] + rank1["own_state"] == rank0["parameters"] == rank0["saved_state"]
    assert rank0["error"] is None and rank1["saved_state"] is None
    assert "has not been consolidated" in rank1["error"]
    for r in (rank0, rank1):  # get_state_dict asks ZeroRedundancyOptimizer.state_dict() before consolidation
        assert "has not been consolidated" in r["get_state_dict_error"]
