"""Lesson 00's checker passes right answers and names what is wrong in wrong ones, on 2 and 3
ranks; answers that make no process group cannot know the other ranks' names."""

import pytest

import lesson00_solutions as solutions
from ddp_lib.exercises.lesson00 import check_who_am_i


@pytest.mark.parametrize("answer", [solutions.right, solutions.imported_by_name_from_the_group])
def test_right_answers_pass(answer):
    report = check_who_am_i(answer, world_sizes=(1, 2, 3))
    assert report.passed and str(report).endswith("All checks passed."), str(report)


@pytest.mark.parametrize("answer, line", [
    (solutions.no_group, "FAIL world_size 2: rank 0 returned only its own name"),
    (solutions.reads_callers_frames, "FAIL world_size 2: rank 0 returned only its own name"),
    (solutions.main_everywhere, "FAIL world_size 2: rank 1 returned is_main=True, expected False"),
    (solutions.reversed_order, "FAIL world_size 2: rank 0 has every rank's name but not in rank order"),
    (solutions.hard_coded_world_size, "FAIL world_size 3"),
    (solutions.raises, "FAIL world_size 2: rank 0 raised RuntimeError: not written yet"),
])
def test_wrong_answers_are_named(answer, line):
    report = check_who_am_i(answer, world_sizes=(2, 3), timeout=20)
    assert not report.passed
    assert any(got.startswith(line) for got in report.lines), str(report)
