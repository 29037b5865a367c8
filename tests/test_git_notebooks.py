"""`make setup-git` makes nbdime git's diff and merge driver for notebooks, tried on a throwaway repository."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None,
                                reason="needs git and make")


def notebook(source: str, output: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell(source, execution_count=1, id="code")
    code.outputs = [nbformat.v4.new_output("stream", text=output)]
    nb.cells = [nbformat.v4.new_markdown_cell("# Title", id="title"), code]
    return nb


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with this project's .gitattributes, set up by `make setup-git` and one notebook committed."""
    env = {**os.environ, "GIT_DIR": str(tmp_path / ".git")}
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    # The project's own recipe, pointed at the throwaway repository and at this environment's nbdime.
    subprocess.run(["make", "-s", "--no-print-directory", "setup-git", "INSTALLED=", f"VENV={VENV_BIN.parent}"],
                   cwd=ROOT, env=env, check=True)
    shutil.copy(ROOT / ".gitattributes", tmp_path)
    nbformat.write(notebook("print(run_ranks(f, 2))", "[0, 1]\n"), tmp_path / "n.ipynb")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "one")
    return tmp_path


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "color.ui=never", *args],
                          cwd=repo, env=env, capture_output=True, text=True, check=check)


def test_setup_git_names_the_drivers_gitattributes_assigns(repo):
    attributes = (ROOT / ".gitattributes").read_text()
    assert re.search(r"^\*\.ipynb\s+diff=jupyternotebook\s+merge=jupyternotebook\s*$", attributes, re.MULTILINE)
    config = git(repo, "config", "--local", "--list").stdout
    assert f"diff.jupyternotebook.command={VENV_BIN}/git-nbdiffdriver diff" in config
    assert f"merge.jupyternotebook.driver={VENV_BIN}/git-nbmergedriver merge %O %A %B %L %P" in config


def test_git_diff_shows_the_changed_line_of_a_cell_not_json(repo):
    nbformat.write(notebook("print(run_ranks(f, 4))", "[0, 1, 2, 3]\n"), repo / "n.ipynb")
    diff = re.sub(r"\x1b\[[0-9;]*m", "", git(repo, "diff").stdout)  # nbdime colours its output
    assert "## modified /cells/1/source:" in diff, diff
    assert re.search(r"^-\s+print\(run_ranks\(f, 2\)\)$", diff, re.MULTILINE), diff
    assert re.search(r"^\+\s+print\(run_ranks\(f, 4\)\)$", diff, re.MULTILINE), diff
    assert '"source":' not in diff and '"cell_type":' not in diff  # cells, not JSON
    raw = git(repo, "diff", "--no-ext-diff").stdout  # git's own line diff, for comparison
    assert '"source":' in raw or '"print(run_ranks(f, 4))"' in raw


def test_git_merge_joins_changes_to_a_cells_source_and_output(repo):
    # One branch edits the code, the other its output: neighbouring lines of the JSON, which
    # git's line merge reports as a conflict; nbdime merges them cell by cell.
    git(repo, "checkout", "-qb", "other")
    nbformat.write(notebook("print(run_ranks(f, 2))", "[0, 1] done\n"), repo / "n.ipynb")
    git(repo, "commit", "-qam", "output")
    git(repo, "checkout", "-q", "main")
    nbformat.write(notebook("print(run_ranks(f, 4))", "[0, 1]\n"), repo / "n.ipynb")
    git(repo, "commit", "-qam", "source")
    plain = git(repo, "-c", "merge.jupyternotebook.driver=false", "merge", "--no-edit", "other", check=False)
    assert plain.returncode != 0  # without nbdime: a conflict
    git(repo, "merge", "--abort")
    merged = git(repo, "merge", "--no-edit", "other", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    cell = nbformat.read(repo / "n.ipynb", as_version=4).cells[1]
    assert cell.source == "print(run_ranks(f, 4))" and cell.outputs[0].text == "[0, 1] done\n"
