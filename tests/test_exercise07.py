"""Lesson 07's reading checkers: exercise 4 (the 3-rank shape mismatch under DETAIL), exercise 1 (the rank a
monitored barrier finds missing), exercise 3 (the ranks rank 0's error names) and exercise 5 (the stray
collective's function and step). No process: the runs themselves are in docs/answers.md. Right answers
written differently pass; each honest mistake gets a line naming the fix."""

import torch

from ddp_lib.exercises.lesson07 import (
    check_barrier_reading,
    check_diagnosis,
    check_mismatch_reading,
    check_missing_reading,
)


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


# Exercises 1, 3 and 5: readings of runs shown in docs/answers.md (no process here either).

def test_barrier_reading_right_answers_written_differently_pass():
    for missing in ({2}, [2], (2,), range(2, 3), [torch.tensor(2)], [2.0]):
        report = check_barrier_reading(missing)
        assert report.passed, str(report)


def test_barrier_reading_mistakes_are_named():
    assert "FAIL write your reading" in str(check_barrier_reading(None))
    assert "FAIL write your reading" in str(check_barrier_reading("rank 2"))
    # a set with nothing in it: no rank missing, though every rank raised
    assert "a rank is missing" in str(check_barrier_reading(set()))
    # the echoes "from rank 0" read as rank 0 missing
    for named in ({0}, {0, 2}, [0, 1, 3]):
        assert "rank 0's error names ranks, so rank 0 reached the barrier" in str(check_barrier_reading(named))
    # ranks that reached the barrier read as missing
    for named in ({1, 3}, {1, 2, 3}, [3]):
        assert "ranks 1 and 3 each say they reached the barrier" in str(check_barrier_reading(named))
    assert "rank 4: the run has ranks 0 to 3 only" in str(check_barrier_reading({2, 4}))


def test_missing_reading_right_answers_and_mistakes():
    for named, kind in (({1, 2}, "broadcast"), ((2, 1), " DDP's Broadcast "), ([1.0, 2.0], "gloo:broadcast")):
        report = check_missing_reading(named, kind)
        assert report.passed, str(report)
    assert "the 2-rank run's message: run it with 3 ranks" in str(check_missing_reading({1}, "broadcast"))
    assert "rank 0 wrote the message" in str(check_missing_reading({0, 1, 2}, "broadcast"))
    assert "rank 3: the run has ranks 0 to 2 only" in str(check_missing_reading({1, 2, 3}, "broadcast"))
    assert "FAIL write your reading" in str(check_missing_reading(None))


def test_missing_reading_needs_the_why_not_only_the_ranks():
    # {1, 2} can be guessed from exercise 1's pattern without running anything: the kind of collective
    # ranks 1 and 2 wait in, the reason both are named, must be read from the run too
    assert not check_missing_reading({1, 2}).passed
    assert "the kind of collective the other ranks wait in" in str(check_missing_reading({1, 2}))
    assert "rank 0's stray call" in str(check_missing_reading({1, 2}, "all_reduce"))
    assert "the check rank 0 waits in" in str(check_missing_reading({1, 2}, "monitored_barrier"))
    assert "not the collective the other ranks wait in" in str(check_missing_reading({1, 2}, "all_gather"))


def test_diagnosis_right_answers_written_differently_pass():
    for function, step in (("_best_so_far", 2), ("stray_report._best_so_far()", torch.tensor(2)),
                           ("best_so_far", 2.0), (" _best_so_far(total)", 2)):
        report = check_diagnosis(function, step)
        assert report.passed, str(report)
        assert len(report.lines) == 2


def test_diagnosis_unfilled_gives_one_line():
    report = check_diagnosis(None, None)
    assert [line for line in report.lines if line.startswith("FAIL")] == report.lines
    assert len(report.lines) == 1 and "_best_so_far" not in str(report)


def test_diagnosis_mistakes_are_named():
    assert "torch's function, not the script's" in str(check_diagnosis("all_reduce", 2))
    assert "_report calls the function that calls the collective" in str(check_diagnosis("_report", 2))
    assert "train's all_reduce runs on every rank" in str(check_diagnosis("train", 2))
    assert "is not the function the traceback names" in str(check_diagnosis("evaluate", 2))
    assert "steps count from 0" in str(check_diagnosis("_best_so_far", 3))
    assert "not step 0" in str(check_diagnosis("_best_so_far", 0))
    assert "write the step as an int" in str(check_diagnosis("_best_so_far", "last"))
