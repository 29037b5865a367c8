"""The README's "Files behind each lesson" table lists, for every lesson, each ddp_lib file the
lesson's code cells import from, and nothing that does not exist."""

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
ROW = re.compile(r"^\| `(\d\d[a-z]?)_\w+` \| (.*) \|$")


def lesson_id(notebook: Path) -> str:
    """"06" for 06_torchrun.ipynb, "06b" for 06b_cluster_lab.ipynb."""
    return notebook.name.split("_", 1)[0]


def readme_rows() -> dict[str, list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Files behind each lesson", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = ROW.match(line)
        if found:
            rows[found.group(1)] = re.findall(r"`(ddp_lib/[\w/]+\.py)`", found.group(2))
    return rows


def imported_files(notebook: Path) -> set[str]:
    """The ddp_lib source files that define what the notebook's code cells import."""
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
    return {str(Path(f).resolve().relative_to(ROOT)) for f in files} - {"ddp_lib/__init__.py"}


def test_every_lesson_has_a_row():
    assert sorted(readme_rows()) == [lesson_id(p) for p in LESSONS]


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.name)
def test_row_lists_the_files_the_lesson_imports(notebook):
    listed = readme_rows()[lesson_id(notebook)]
    assert [f for f in listed if not (ROOT / f).is_file()] == []
    assert sorted(imported_files(notebook) - set(listed)) == []
