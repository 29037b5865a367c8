"""Lesson 07's exercise 4 checker: a reading of the 3-rank shape mismatch under DETAIL (no process: the
run itself is in docs/answers.md). Right answers written differently pass; each honest mistake gets a line
naming the fix."""

import torch

from ddp_lib.exercises.lesson07 import check_mismatch_reading


def test_right_answers_written_differently_pass():
    for reading in ({0: ([2], [3]), 1: ([3], [2]), 2: ([4], [2])},
                    {2: (torch.Size([4]), torch.Size([2])), 1: [(3,), (2,)], 0: [(2,), [3]]}):
        report = check_mismatch_reading(reading)
        assert report.passed, str(report)
        assert len(report.lines) == 3


def test_no_answer_yet_asks_for_the_form_without_giving_it_away():
    for reading in (None, {}, [([2], [3])]):
        report = check_mismatch_reading(reading)
        assert not report.passed
        assert "write your reading" in str(report)
        assert "[4]" not in str(report)


def test_the_two_rank_picture_misses_rank_2():
    report = check_mismatch_reading({0: ([2], [3]), 1: ([3], [2])})
    assert "FAIL no pair for rank 2, yet it raised too" in str(report)


def test_rank_2_read_against_rank_1():
    report = check_mismatch_reading({0: ([2], [3]), 1: ([3], [2]), 2: ([4], [3])})
    assert "FAIL rank 2: its error does not compare it with [3]" in str(report)


def test_a_reversed_pair_and_a_wrong_own_shape_are_named():
    text = str(check_mismatch_reading({0: ([3], [2]), 1: ([3], [2]), 2: ([3], [2])}))
    assert "FAIL rank 0: the pair is reversed" in text
    assert "FAIL rank 2: its own shape is not [3]" in text


def test_a_rank_outside_the_run_and_a_bad_pair():
    text = str(check_mismatch_reading({0: "[2] vs [3]", 1: ([3], [2]), 2: ([4], [2]), 3: ([5], [2])}))
    assert "FAIL rank 3: the run has ranks 0, 1 and 2 only" in text
    assert "FAIL rank 0: give a pair of shapes" in text
