"""A table written by a tool between two marker lines of a Markdown page: put it in, or check it is
current. Used by tools/copy_table.py (README.md) and tools/lesson_files.py (docs/library.md)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def with_table(text: str, rendered: str, start: str, end: str, page: Path) -> str:
    """``text`` with ``rendered`` between the lines ``start`` and ``end``."""
    pattern = re.compile(re.escape(start) + r"\n.*?\n" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{page}: the markers {start!r} and {end!r} are missing")
    return pattern.sub(lambda _: f"{start}\n{rendered}\n{end}", text)


def rewrite_or_check(page: Path, start: str, end: str, table, what: str, tool: str, argv: list[str] | None) -> int:
    """The command line of a table tool: rewrite ``page``'s table from ``table()``, or with
    ``--check`` exit 1 if it is out of date."""
    parser = argparse.ArgumentParser(description=f"write {what} in {page.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="only say whether the table is up to date")
    args = parser.parse_args(argv)
    current = page.read_text()
    wanted = with_table(current, table(), start, end, page)
    name = page.relative_to(ROOT)
    if args.check:
        if wanted != current:
            print(f"{name}: {what} is out of date; run python {tool}")
            return 1
        return 0
    if wanted != current:
        page.write_text(wanted)
        print(f"rewrote {what} in {name}")
    return 0
