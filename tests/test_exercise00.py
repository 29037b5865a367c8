"""Lesson 00's checker passes a right answer and names what is wrong in wrong ones."""

import textwrap

import pytest

from ddp_lib.exercises.lesson00 import check_who_am_i

SOLUTIONS = {
    "right": "return {'rank': rank, 'world_size': world_size, 'is_main': rank == 0}",
    "main_everywhere": "return {'rank': rank, 'world_size': world_size, 'is_main': True}",
    "raises": "raise RuntimeError('not written yet')",
}


@pytest.fixture
def solution(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))

    def load(key):
        name = f"who_am_i_{key}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
            def who_am_i(rank, world_size):
                {SOLUTIONS[key]}
        """))
        return __import__(name).who_am_i

    return load


def test_a_right_solution_passes(solution):
    report = check_who_am_i(solution("right"), world_sizes=(1, 2))
    assert report.passed and str(report).endswith("All checks passed.")


def test_a_wrong_answer_names_the_rank_and_both_values(solution):
    report = check_who_am_i(solution("main_everywhere"), world_sizes=(1, 2))
    assert not report.passed
    assert report.lines[0].startswith("PASS world_size 1")
    assert report.lines[1] == ("FAIL world_size 2: rank 1 returned {'rank': 1, 'world_size': 2, 'is_main': True}, "
                               "expected {'rank': 1, 'world_size': 2, 'is_main': False}")


def test_a_worker_that_raises_is_reported_with_the_rank(solution):
    report = check_who_am_i(solution("raises"), world_sizes=(2,))
    assert report.lines == ["FAIL world_size 2: rank 0 raised RuntimeError: not written yet"]
