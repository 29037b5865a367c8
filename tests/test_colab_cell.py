"""The lessons' first cell (tools/colab_cell.py, put in place by tools/add_colab_cell.py): on Colab
(a stand-in ``google.colab`` module, a fresh environment where ``ddp_lib`` is not installed) it fetches
the project, makes it importable in the running interpreter and in the processes it starts, keeps the
torch it found, and moves to notebooks/; anywhere else it does nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import add_colab_cell  # noqa: E402

sys.path.pop(0)

# After the cell: where it left the interpreter, for the test to read.
REPORT = textwrap.dedent("""
    import json, os, subprocess, sys
    try:
        import ddp_lib
        where = ddp_lib.__file__
    except ModuleNotFoundError:
        where = None
    child = subprocess.run([sys.executable, "-c", "import ddp_lib; print(ddp_lib.__file__)"],
                           capture_output=True, text=True).stdout.strip() or None
    from importlib.util import find_spec
    print("REPORT " + json.dumps({"cwd": os.getcwd(), "ddp_lib": where, "child": child,
                                  "torch": find_spec("torch").origin}))
""")


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> str:
    """A new virtual environment that sees this one's packages (torch, numpy, ...) but where
    ddp_lib is not installed: its editable install's .pth file is not processed there."""
    env = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "outer_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # torch is found there (imported by the Colab cell in the first test), ddp_lib is not.
    check = subprocess.run([python, "-c", "from importlib.util import find_spec; assert find_spec('torch'); "
                            "import ddp_lib"], cwd=env, capture_output=True, text=True)
    assert "No module named 'ddp_lib'" in check.stderr, check.stderr
    return str(python)


@pytest.fixture
def project(tmp_path) -> Path:
    """A small git repository shaped like this one, standing in for the project's public address."""
    repo = tmp_path / "published"
    (repo / "ddp_lib").mkdir(parents=True)
    (repo / "ddp_lib" / "__init__.py").write_text('__version__ = "published"\n')
    (repo / "notebooks").mkdir()
    (repo / "notebooks" / "00_start_here.ipynb").write_text("{}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "--quiet"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "lessons"], check=True)
    return repo


def run_cell(python: str, tmp_path: Path, source: str, colab: bool, env: dict | None = None):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "BINDER_LAUNCH_HOST", "BINDER_REQUEST")}
    environment.update(HOME=str(home), **(env or {}))
    if colab:
        stub = tmp_path / "stub" / "google" / "colab"
        stub.mkdir(parents=True, exist_ok=True)
        (stub.parent / "__init__.py").write_text("")
        (stub / "__init__.py").write_text("")
        environment["PYTHONPATH"] = str(tmp_path / "stub")
    done = subprocess.run([python, "-c", source + "\n" + REPORT], cwd=work, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = [line for line in done.stdout.splitlines() if not line.startswith("REPORT ")]
    report = json.loads(done.stdout.split("REPORT ", 1)[1])
    return printed, report, home, work


def test_on_colab_the_project_is_fetched_importable_and_torch_kept(fresh_python, project, tmp_path):
    source = add_colab_cell.setup_source(str(project))
    printed, report, home, _ = run_cell(fresh_python, tmp_path, source, colab=True)
    checkout = home / "ddp-lib"
    assert report["cwd"] == str(checkout / "notebooks")
    assert report["ddp_lib"] == str(checkout / "ddp_lib" / "__init__.py")  # this kernel
    assert report["child"] == str(checkout / "ddp_lib" / "__init__.py")  # a process it starts
    assert report["torch"].startswith(sysconfig.get_paths()["purelib"])  # the torch that was there
    import torch

    assert printed[0].startswith("Colab: ddp_lib from ") and torch.__version__ in printed[1], printed
    assert "may differ" in printed[1]
    # Run again (the learner reruns the cell): no second clone, the same result.
    printed_again, report_again, _, _ = run_cell(fresh_python, tmp_path, source, colab=True)
    assert report_again == report and printed_again == printed


def test_elsewhere_it_does_nothing(fresh_python, tmp_path):
    source = add_colab_cell.setup_source("https://github.com/example/unreachable")
    printed, report, home, work = run_cell(fresh_python, tmp_path, source, colab=False)
    assert printed == [] and report["cwd"] == str(work)
    assert report["ddp_lib"] is None and report["child"] is None
    assert list(home.iterdir()) == []


def test_on_binder_it_only_says_to_use_two_ranks(fresh_python, tmp_path):
    source = add_colab_cell.setup_source("https://github.com/example/unreachable")
    printed, report, home, work = run_cell(fresh_python, tmp_path, source, colab=False,
                                           env={"BINDER_LAUNCH_HOST": "https://mybinder.org/"})
    assert len(printed) == 1 and "world_size=2" in printed[0]
    assert report["cwd"] == str(work) and list(home.iterdir()) == []


def test_the_cell_and_links_are_added_once_and_counts_stay_in_order(tmp_path):
    lesson = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))[0]
    copy = tmp_path / lesson.name
    shutil.copy(lesson, copy)
    repository = "https://github.com/example/ddp-lib"
    assert add_colab_cell.main  # the command line wraps add_cells
    nb = nbformat.read(copy, as_version=4)
    before = len(nb.cells)
    assert add_colab_cell.add_cells(nb, repository, lesson.name)
    assert not add_colab_cell.add_cells(nb, repository, lesson.name)  # idempotent
    nbformat.validate(nb)
    assert len(nb.cells) == before + 2
    links, setup = nb.cells[:2]
    assert f"colab.research.google.com/github/example/ddp-lib/blob/colab/notebooks/{lesson.name}" in links.source
    assert f"mybinder.org/v2/gh/example/ddp-lib/main?labpath=notebooks%2F{lesson.name}" in links.source
    assert f'REPOSITORY = "{repository}"' in setup.source and setup.outputs == []
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert counts == list(range(1, len(counts) + 1))
    # A new address updates both cells in place.
    assert add_colab_cell.add_cells(nb, "https://github.com/other/name", lesson.name)
    assert len(nb.cells) == before + 2 and "other/name" in nb.cells[0].source + nb.cells[1].source


def test_the_address_must_be_set(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "https://github.com/OWNER/REPO"\n')
    with pytest.raises(SystemExit, match="Repository"):
        add_colab_cell.repository_url(pyproject)
    pyproject.write_text('[project]\nname = "x"\n[project.urls]\nRepository = "https://github.com/a/b.git"\n')
    assert add_colab_cell.repository_url(pyproject) == "https://github.com/a/b"
