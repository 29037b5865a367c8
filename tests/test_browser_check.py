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
