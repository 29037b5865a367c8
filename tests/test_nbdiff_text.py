"""`git diff` on a notebook shows cells as text (tools/nbdiff_text.py as git's textconv)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "nbdiff_text.py"


def small_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("print(spawn(f, 2))", execution_count=1)
    code.outputs = [nbformat.v4.new_output("stream", text="[0, 1]\n"),
                    nbformat.v4.new_output("display_data",
                                           data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})]
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), code]
    return nb


def test_prints_cells_outputs_and_a_fingerprint_for_pictures(tmp_path):
    path = tmp_path / "n.ipynb"
    nbformat.write(small_notebook(), path)
    text = subprocess.run([sys.executable, str(TOOL), str(path)], capture_output=True, text=True, check=True).stdout
    assert "==== cell 0 markdown\n# Title" in text
    assert "==== cell 1 code [1]\nprint(spawn(f, 2))\n  [stdout]\n    [0, 1]" in text
    assert re.search(r"\[display_data image/png\] sha1 [0-9a-f]{12}, 12 characters of base64", text)
    assert "iVBORw0KGgo=" not in text


def test_gitattributes_and_make_setup_git_name_the_same_driver():
    assert re.search(r"^\*\.ipynb\s+diff=ipynb\s*$", (ROOT / ".gitattributes").read_text(), re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    assert 'git config diff.ipynb.textconv "$(PYTHON) tools/nbdiff_text.py"' in makefile


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_diff_shows_the_changed_line_of_a_cell(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    (tmp_path / "tools").mkdir()
    shutil.copy(TOOL, tmp_path / "tools")
    shutil.copy(ROOT / ".gitattributes", tmp_path)
    git("config", "diff.ipynb.textconv", f'"{sys.executable}" tools/nbdiff_text.py')
    nb = small_notebook()
    nbformat.write(nb, tmp_path / "n.ipynb")
    git("add", ".")
    git("commit", "-qm", "one")
    nb.cells[1].source = "print(spawn(f, 4))"
    nbformat.write(nb, tmp_path / "n.ipynb")
    diff = git("diff")
    assert "-print(spawn(f, 2))\n+print(spawn(f, 4))" in diff
    assert '"source"' not in diff  # cells, not JSON
