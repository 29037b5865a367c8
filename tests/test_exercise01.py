"""The checker of lesson 01's exercise refuses answers that skip the all-reduce or get the mean
wrong, and accepts right answers however they call the all-reduce, on 2 and 3 ranks."""

import pytest

import lesson01_solutions as solutions
from ddp_lib.exercises.lesson01 import check_mean_across_ranks


@pytest.mark.parametrize("answer", [
    solutions.correct,
    solutions.through_distributed_c10d,
    solutions.imported_by_name,
    solutions.average_op,
    solutions.process_group_method,
    solutions.divides_first,
])
def test_right_answers_pass_however_they_call_all_reduce(answer):
    report = check_mean_across_ranks(answer, timeout=30)
    assert report.passed, str(report)
    assert [line.split(",")[0] for line in report.lines] == ["PASS world_size 2", "PASS world_size 3"]
    assert str(report).endswith("All checks passed.")


def test_values_are_fresh_on_every_check():
    a, b = (str(check_mean_across_ranks(solutions.correct, world_sizes=(2,))) for _ in range(2))
    assert a != b


@pytest.mark.parametrize("answer, message", [
    (solutions.no_communication, "its own value: it never combined values"),
    (solutions.reads_callers_frames, "no rank ran an all-reduce"),
    (solutions.forges_the_checkers_records, "no rank ran an all-reduce"),
    (solutions.reads_gc, "no rank ran an all-reduce"),
    (solutions.closed_form, "no rank ran an all-reduce"),
    (solutions.guessed_from_rank, "expected"),
    (solutions.gathers_instead, "no rank ran an all-reduce"),
    (solutions.sum_not_mean, "the sum over ranks: divide by world_size"),
    (solutions.integer_tensor, "integer arithmetic"),
    (solutions.reduce_to_rank0, "only rank 0 has the mean"),
    (solutions.returns_tensor, "returned a Tensor, not a number (call .item() on it)"),
    (solutions.raises, "rank 1 raised ValueError: forgot something"),
    (solutions.only_rank0_communicates, "does every rank call the same collectives"),
    (solutions.number_that_reads_the_checker, "its own value"),
    (solutions.gathers_plus_token_all_reduce, "no all-reduce over all ranks carried each rank's x"),
    (solutions.through_the_store, "no all-reduce over all ranks carried each rank's x"),
    (solutions.all_reduce_within_itself, "no all-reduce over all ranks carried each rank's x"),
])
def test_wrong_answers_are_named(answer, message):
    report = check_mean_across_ranks(answer, world_sizes=(2, 3), timeout=20)
    assert not report.passed
    assert any(line.startswith("FAIL") and message in line for line in report.lines), str(report)
    assert str(report).endswith("Not yet: fix what the FAIL lines say.")


def test_a_hard_coded_world_size_fails_on_three_ranks():
    report = check_mean_across_ranks(solutions.hard_coded_world_size, world_sizes=(2, 3), timeout=20)
    assert report.lines[0].startswith("PASS world_size 2")
    assert report.lines[1].startswith("FAIL world_size 3"), str(report)


def test_a_worker_defined_in_a_test_function_is_refused_before_starting():
    def local(rank, world_size, x):
        return 0.0

    with pytest.raises(Exception, match="nested function|top level"):
        check_mean_across_ranks(local, world_sizes=(2,))
