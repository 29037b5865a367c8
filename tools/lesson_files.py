"""Write the "Files behind each lesson" table of docs/library.md from the lessons themselves.

    python tools/lesson_files.py           # rewrite the table
    python tools/lesson_files.py --check   # exit 1 if the table is not what the lessons import

Each row lists every ddp_lib source file that defines what the lesson's code cells import (read
from the notebook, resolved by importing ddp_lib), then the exercise's worked solution. Run it
after changing a lesson's imports; tests/test_lesson_files.py fails until the table is rewritten.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling tools, also when loaded by path
import marked_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "library.md"
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
START = "<!-- lesson files: written by tools/lesson_files.py -->"
END = "<!-- end of lesson files -->"


def imported_files(notebook: Path) -> set[str]:
    """The ddp_lib source files (relative to the repository) that define what the notebook's code cells import."""
    files = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "\n".join(line for line in "".join(cell["source"]).splitlines()
                           if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ddp_lib"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    try:
                        obj = getattr(module, alias.name)
                    except AttributeError:  # a submodule not imported by its package
                        obj = importlib.import_module(f"{node.module}.{alias.name}")
                    obj = inspect.unwrap(obj)  # a decorated function: where it is written
                    defined = inspect.ismodule(obj) or inspect.isfunction(obj) or inspect.isclass(obj)
                    files.add(inspect.getsourcefile(obj if defined else module))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("ddp_lib"):
                        files.add(inspect.getsourcefile(importlib.import_module(alias.name)))
    return {Path(f).resolve().relative_to(ROOT).as_posix() for f in files} - {"ddp_lib/__init__.py"}


def row_files(notebook: Path) -> list[str]:
    solution = f"ddp_lib/exercises/solutions/lesson{notebook.name.split('_', 1)[0]}.py"
    files = sorted(imported_files(notebook) - {solution})
    return files + ([solution] if (ROOT / solution).is_file() else [])


def table(lessons: list[Path] = LESSONS) -> str:
    lines = ["| notebook | files |", "|---|---|"]
    for notebook in lessons:
        lines.append(f"| `{notebook.stem}` | " + ", ".join(f"`{f}`" for f in row_files(notebook)) + " |")
    return "\n".join(lines)


def with_table(page_text: str, rendered: str) -> str:
    return marked_table.with_table(page_text, rendered, START, END, PAGE)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    return marked_table.rewrite_or_check(PAGE, START, END, table, "the lesson files table", "tools/lesson_files.py",
                                         argv)


if __name__ == "__main__":
    sys.exit(main())
