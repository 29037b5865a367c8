"""Lesson 09's second compile: a new batch size compiles once more, with the size as an input."""

from ddp_lib.demos.dynamic_sizes import compiles_per_batch_size
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import in_one_job


def test_a_new_batch_size_compiles_once_more_and_later_sizes_reuse_it():
    results = run_ranks(compiles_per_batch_size, 2, show_output=False)
    for r in results:
        assert r["compiles"] == [{"at_size": 16, "size_is_input": False}, {"at_size": 12, "size_is_input": True}]


def test_one_size_compiles_once():
    (result,) = run_ranks(compiles_per_batch_size, 1, kwargs=dict(sizes=(8, 8, 8)), show_output=False)
    assert result["compiles"] == [{"at_size": 8, "size_is_input": False}]


def test_under_ddp_a_new_batch_size_also_compiles_once_more_and_later_sizes_reuse_it():
    calls = {"ddp": ("ddp_lib.demos.dynamic_sizes:compiles_per_batch_size", dict(ddp=True))}
    for r in run_ranks(in_one_job, 2, kwargs=dict(calls=calls), show_output=False):
        assert r["ddp"]["compiles"] == [{"at_size": 16, "size_is_input": False},
                                        {"at_size": 12, "size_is_input": True}]
