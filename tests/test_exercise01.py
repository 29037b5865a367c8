"""The checker of lesson 01's exercise, on a correct answer and on the usual wrong ones."""

import pytest

import lesson01_solutions as solutions
from ddp_lib.exercises.lesson01 import check_mean_across_ranks


def test_correct_answer_passes_with_fresh_values():
    report = check_mean_across_ranks(solutions.correct, timeout=30)
    assert report.passed, str(report)
    assert [line.split(",")[0] for line in report.lines] == ["PASS world_size 2", "PASS world_size 3"]
    assert str(report).endswith("All checks passed.")


def test_values_are_drawn_at_check_time_unless_seeded():
    a, b = (str(check_mean_across_ranks(solutions.correct, world_sizes=(2,), seed=s)) for s in (1, 1))
    assert a == b
    c = str(check_mean_across_ranks(solutions.correct, world_sizes=(2,), seed=2))
    assert c != a


@pytest.mark.parametrize("answer, message", [
    (solutions.no_communication, "its own value: it never combined values"),
    (solutions.closed_form, "expected"),
    (solutions.gathers_instead, "no rank called dist.all_reduce"),
    (solutions.sum_not_mean, "the sum over ranks: divide by world_size"),
    (solutions.reduce_to_rank0, "only rank 0 has the mean"),
    (solutions.returns_tensor, "returned a Tensor, not a number (call .item() on it)"),
    (solutions.raises, "rank 1 raised ValueError: forgot something"),
    (solutions.only_rank0_communicates, "does every rank call the same collectives"),
])
def test_wrong_answers_are_named(answer, message):
    report = check_mean_across_ranks(answer, world_sizes=(2, 3), timeout=20, seed=7)
    assert not report.passed
    assert any(line.startswith("FAIL") and message in line for line in report.lines), str(report)
    assert str(report).endswith("Not yet: fix what the FAIL lines say.")


def test_integer_arithmetic_is_named():
    # seed 3 draws 31 and 76 for 2 ranks: a mean of 53.5, which integer division makes 53
    report = check_mean_across_ranks(solutions.integer_tensor, world_sizes=(2,), seed=3)
    assert any("the mean rounded down: integer arithmetic" in line for line in report.lines), str(report)


def test_a_worker_defined_in_a_test_function_is_refused_before_starting():
    def local(rank, world_size, x):
        return 0.0

    with pytest.raises(Exception, match="nested function|top level"):
        check_mean_across_ranks(local, world_sizes=(2,))
