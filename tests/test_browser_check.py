"""The parts of tools/browser_check.py that need no browser: the time each cell may take, read
from the lesson's own words, and which cells may show an error. (`make test-browser` runs the rest.)"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import browser_check  # noqa: E402


def notebook(tmp_path, cells):
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": kind, "source": text, "metadata": {"tags": tags} if tags else {}}
        for kind, text, tags in cells]}))
    return path


def test_a_cell_may_take_its_stated_time_with_a_margin_else_the_default(tmp_path):
    path = notebook(tmp_path, [
        ("markdown", "The next cell takes about 40 s.", None), ("code", "a", None),
        ("code", "b", None),
        ("markdown", "This runs for roughly 2 minutes.", None), ("code", "c", None),
        ("markdown", "Fast: about 5 s.", None), ("code", "d", None),
    ])
    assert browser_check.stated_limits(path) == [
        browser_check.STATED_MARGIN * 40, browser_check.DEFAULT_CELL_LIMIT,
        browser_check.STATED_MARGIN * 120, browser_check.DEFAULT_CELL_LIMIT]


def test_only_cells_tagged_raises_exception_may_show_an_error(tmp_path):
    path = notebook(tmp_path, [("code", "a", ["raises-exception"]), ("markdown", "x", None), ("code", "b", None)])
    assert browser_check.expected_errors(path) == [True, False]


def test_every_lesson_is_checked_by_default():
    lessons = sorted(p.name for p in browser_check.LESSONS.glob("*.ipynb") if p.name[:2].isdigit())
    assert browser_check.lessons() == lessons


def test_an_unknown_lesson_is_refused_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as exit_:
        browser_check.main(["99_nothing.ipynb"])
    assert exit_.value.code == 2
    assert "no such lesson: 99_nothing.ipynb" in capsys.readouterr().err


def cells(*states):
    """Readings of code cells: "*" running or queued, "3" done, "" not run; ":text" its output."""
    return [{"prompt": f"[{s.split(':')[0] or ' '}]:", "text": s.partition(":")[2]} for s in states]


def test_a_cell_is_blank_from_its_start_to_its_first_output_or_its_end():
    clock = browser_check.CellClock()
    assert clock.observe(0, cells("*", "*", "*")) == [0, 1, 2]  # cell 0 runs, the others queued
    clock.observe(2, cells("1", "*", "*"))  # cell 0 ended with no output: 2 s blank
    clock.observe(5, cells("1", "*:starting the forkserver", "*"))
    clock.observe(40, cells("1", "2:starting the forkserver\n[rank 0] done", "*"))
    assert clock.took == {0: 2, 1: 38}
    assert clock.blank_starts(now=75) == {0: 2, 1: 3, 2: 35}  # cell 2 still running, blank so far
    clock.observe(80, cells("1", "2:x", "3:y"))
    assert clock.blank_starts(now=90) == {0: 2, 1: 3, 2: 40}
