"""The checker of lesson 01's exercise, on a correct solution and on the usual wrong ones."""

import pytest

import lesson01_solutions as solutions
from ddp_lib.exercises.lesson01 import check_mean_of_squares, expected_mean


def test_expected_mean():
    assert expected_mean(2) == 2.5 and expected_mean(3) == pytest.approx(14 / 3)


def test_correct_solution_passes():
    report = check_mean_of_squares(solutions.correct, timeout=30)
    assert report.passed
    assert str(report).splitlines() == ["✓ world_size 2: every rank returned 2.5",
                                        "✓ world_size 3: every rank returned 4.66667",
                                        "All checks passed."]


@pytest.mark.parametrize("solution, message", [
    (solutions.no_communication, "rank 1 returned 4, its own value: it never combined values"),
    (solutions.sum_not_mean, "rank 0 returned 5, the sum over ranks: divide by world_size"),
    (solutions.integer_tensor, "rank 2 returned 4, the mean rounded down: integer arithmetic"),
    (solutions.reduce_to_rank0, "only rank 0 has the mean 2.5; dist.reduce leaves it on the destination rank only"),
    (solutions.returns_tensor, "rank 0 returned a Tensor, not a number (call .item() on it)"),
    (solutions.raises, "rank 1 raised ValueError: forgot something"),
    (solutions.only_rank0_communicates, "every rank must call all_reduce"),
])
def test_wrong_solutions_are_named(solution, message):
    report = check_mean_of_squares(solution, world_sizes=(2, 3), timeout=20)
    assert not report.passed
    assert any(line.startswith("✗") and message in line for line in report.lines), str(report)
    assert str(report).endswith("Not yet: fix the lines marked ✗.")


def test_a_worker_defined_in_main_is_refused_before_starting():
    def local(rank, world_size):
        return 0.0

    report = check_mean_of_squares(local, world_sizes=(2,))
    assert not report.passed
    assert "cannot be launched" in report.lines[0] and "nested function" in report.lines[0]
