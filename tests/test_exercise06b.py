"""Lesson 06b's exercise 4 checker: right readings pass however they are written; honest mistakes get a
FAIL line that says what to look at."""

from __future__ import annotations

import pytest
from torch.distributed.elastic.rendezvous.api import RendezvousClosedError, RendezvousTimeoutError

from ddp_lib.exercises.lesson06b import check_three_nodes_reading

RIGHT = dict(world_size=3, first_error="RendezvousTimeoutError")


@pytest.mark.parametrize("reading", [
    RIGHT,
    dict(world_size="3", first_error=RendezvousTimeoutError),
    dict(world_size=3.0, first_error=RendezvousTimeoutError("deadline")),
    dict(world_size=3, first_error="torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"),
])
def test_right_readings_pass_however_written(reading):
    report = check_three_nodes_reading(**reading)
    assert report.passed, str(report)
    assert len(report.lines) == 2


@pytest.mark.parametrize("change, says", [
    (dict(world_size=2), "the round waits for the third"),
    (dict(first_error="RendezvousConnectionError: The connection to the C10d store has failed"),
     "join deadline passes first"),
    (dict(first_error=RendezvousClosedError()), "join deadline passes first"),
    (dict(first_error=2), "does not start"),
    (dict(world_size=True), "as an int"),
    (dict(first_error="it hung"), "give the name of the error"),
])
def test_each_honest_mistake_fails_with_its_own_line(change, says):
    report = check_three_nodes_reading(**{**RIGHT, **change})
    assert not report.passed
    failed = [line for line in report.lines if line.startswith("FAIL")]
    assert len(failed) == 1 and says in failed[0], str(report)


def test_an_empty_reading_says_what_to_write():
    report = check_three_nodes_reading()
    assert not report.passed and "check_three_nodes_reading(world_size=" in str(report)


def test_the_reading_in_docs_answers_passes_the_checker():
    """docs/answers.md gives exercise 4's reading as the lesson's checker call: it must pass that checker."""
    import ast
    import re
    from pathlib import Path

    answers = (Path(__file__).resolve().parents[1] / "docs" / "answers.md").read_text()
    section = answers.partition("## Lesson 06b")[2].partition("\n## ")[0]
    exercise = section.partition("### Exercise 4 · Three torchruns without root (checked)")[2]
    call = re.search(r"`check_three_nodes_reading\((.+?)\)`", exercise)
    assert call, "docs/answers.md: lesson 06b's exercise 4 gives no checker call"
    report = check_three_nodes_reading(*ast.literal_eval(f"({call[1]},)"))
    assert report.passed, str(report)
