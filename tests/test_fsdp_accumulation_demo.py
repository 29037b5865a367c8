"""Lesson 10's FSDP2 accumulation: set_requires_gradient_sync(False) halves the reduce-scatters of a
two-micro-batch step, set_reshard_after_backward(False) saves all-gathers, and the parameters stay the same."""

from ddp_lib.launch import run_ranks
from ddp_lib.process_group import in_one_job


def test_the_settings_cut_collectives_and_keep_the_parameters():
    calls = {"acc": ("ddp_lib.demos.fsdp_accumulation:accumulation_counts", dict(layers=2, width=32))}
    for r in run_ranks(in_one_job, 2, kwargs=dict(calls=calls), show_output=False):
        every, no_sync, kept = r["acc"]["ways"].values()
        assert every["reduce_scatter"] == 2 * no_sync["reduce_scatter"] == 2 * kept["reduce_scatter"] > 0
        assert kept["all_gather"] < no_sync["all_gather"] == every["all_gather"]
        assert all(way["max_diff"] < 1e-5 for way in (every, no_sync, kept))
