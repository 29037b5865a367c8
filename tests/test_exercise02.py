"""The lesson 02 checker, on a correct solution and on wrong ones: the messages must say what is wrong."""

from __future__ import annotations

import importlib
import itertools
import textwrap

import pytest

from ddp_lib.exercises.lesson02 import check_share, expected_share


def share_problems(fn, n=10, world_sizes=(2, 3)):
    return [line.removeprefix("FAIL ") for line in check_share(fn, n, world_sizes).lines if line.startswith("FAIL")]

_names = itertools.count()


@pytest.fixture
def solution(tmp_path, monkeypatch):
    """Write a learner's file (as %%writefile would) and import its my_share."""
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks

    def write(body: str):
        name = f"lesson02_solution_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        importlib.invalidate_caches()
        return importlib.import_module(name).my_share

    return write


def test_expected_share_is_round_robin():
    assert [expected_share(r, 3, 10) for r in range(3)] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]


def test_correct_solution_passes(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return list(range(rank, n, world_size))
    """)
    assert share_problems(fn) == []
    report = check_share(fn)  # n drawn now
    assert report.passed and report.lines[0].startswith("PASS world_size 2: every rank returned its share of range(")


def test_printing_instead_of_returning(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            print(list(range(rank, n, world_size)))
    """)
    problems = share_problems(fn, world_sizes=(2,))
    assert problems == [
        ("world_size 2, rank 0 returned None and printed '[0, 2, 4, 6, 8]': what a worker prints never "
         "reaches the caller's variables; return the list instead"),
        ("world_size 2, rank 1 returned None and printed '[1, 3, 5, 7, 9]': what a worker prints never "
         "reaches the caller's variables; return the list instead"),
    ]
    assert not check_share(fn, world_sizes=(2,)).passed


def test_ignoring_the_rank(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return list(range(0, n, world_size))
    """)
    problems = share_problems(fn, world_sizes=(2,))
    assert problems == [
        ("world_size 2, rank 1 returned [0, 2, 4, 6, 8], expected [1, 3, 5, 7, 9] "
         "(rank 0's share: does the worker use its rank argument?)"),
        "world_size 2: items [1, 3, 5, 7, 9] are handled by no rank; items [0, 2, 4, 6, 8] by more than one rank",
    ]


def test_contiguous_blocks_are_not_round_robin(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            size = n // world_size
            return list(range(rank * size, (rank + 1) * size))
    """)
    assert share_problems(fn, world_sizes=(2,)) == [
        "world_size 2, rank 0 returned [0, 1, 2, 3, 4], expected [0, 2, 4, 6, 8]",
        "world_size 2, rank 1 returned [5, 6, 7, 8, 9], expected [1, 3, 5, 7, 9]",
    ]


def test_right_items_wrong_order(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return sorted(range(rank, n, world_size), reverse=True)
    """)
    problems = share_problems(fn, world_sizes=(3,))
    assert problems[0] == ("world_size 3, rank 0 returned [9, 6, 3, 0], expected [0, 3, 6, 9] "
                           "(the right items in the wrong order)")
    assert len(problems) == 3  # one per rank; the coverage itself is right


def test_everything_on_every_rank(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return list(range(n))
    """)
    problems = share_problems(fn, world_sizes=(2,))
    assert problems[-1] == "world_size 2: items [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] by more than one rank"


def test_not_a_list(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return len(range(rank, n, world_size))
    """)
    assert share_problems(fn, world_sizes=(2,))[0] == (
        "world_size 2, rank 0 returned int 5; expected a list of ints, [0, 2, 4, 6, 8]")


def test_forgotten_world_size_argument(solution):
    fn = solution("""
        def my_share(rank, n):
            return list(range(rank, n))
    """)
    problems = share_problems(fn, world_sizes=(2,))
    assert len(problems) == 1
    assert problems[0].startswith("world_size 2: rank ")  # whichever rank failed first
    assert problems[0].endswith(
        "raised TypeError: my_share() takes 2 positional arguments but 3 were given "
        "(the launcher calls fn(rank, world_size, n))")


def test_a_worker_defined_in_main_is_refused():
    def my_share(rank, world_size, n):
        return list(range(rank, n, world_size))

    my_share.__module__, my_share.__qualname__ = "__main__", "my_share"
    problems = share_problems(my_share)
    assert len(problems) == 1
    assert problems[0].startswith(
        "the worker cannot be launched: worker my_share is defined in __main__")


def test_a_hard_coded_n_fails_when_n_is_drawn(solution):
    fn = solution("""
        def my_share(rank, world_size, n):
            return list(range(rank, 10, world_size))
    """)
    assert not check_share(fn, seed=1).passed  # seed 1 draws n != 10
