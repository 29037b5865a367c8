"""The "Files behind each lesson" table (docs/library.md) is what tools/lesson_files.py writes from the
lessons: for every lesson, each ddp_lib file its code cells import from, and the worked solution."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("lesson_files", ROOT / "tools" / "lesson_files.py")
lesson_files = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson_files)


def test_the_table_is_written_from_the_lessons():
    page = lesson_files.PAGE.read_text()
    assert lesson_files.with_table(page, lesson_files.table()) == page, \
        "the lesson files table is out of date: run python tools/lesson_files.py"


@pytest.mark.parametrize("notebook", lesson_files.LESSONS, ids=lambda p: p.name)
def test_every_listed_file_exists(notebook):
    listed = lesson_files.row_files(notebook)
    assert listed and [f for f in listed if not (ROOT / f).is_file()] == []
