"""The book as the Pages workflow publishes it: tools/add_colab_cell.py run with the address of the
repository the workflow runs in (here a stand-in), then the book built from that checkout. Every lesson's
page has an "Open in Colab" link to that lesson on the branch the workflow pushes, and an "Open in
Binder" link that builds the repository and opens the lesson; the notebook it downloads (and Colab
opens) starts with the set-up cell that clones the same repository; the page does not show that cell.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

pytest.importorskip("sphinx", reason="the book extra is not installed: run `make book` once")
pytest.importorskip("myst_nb", reason="the book extra is not installed: run `make book` once")

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
STAND_IN = "https://github.com/example-org/ddp-stand-in"
# What the book is built from (book/conf.py's include_patterns, the solutions it shows, the version it reads).
BOOK_SOURCES = ["README.md", "docs", "book", "ddp_lib", "environment.yml", "tools"]


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """A copy of the checkout, prepared and built as .github/workflows/book.yml does."""
    checkout = tmp_path_factory.mktemp("published")
    for name in BOOK_SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, checkout / name)
    (checkout / "notebooks").mkdir()
    for lesson in LESSONS:
        shutil.copy(lesson, checkout / "notebooks" / lesson.name)
    prepare = subprocess.run([sys.executable, "tools/add_colab_cell.py", "--repository", STAND_IN],
                             cwd=checkout, capture_output=True, text=True, timeout=120)
    assert prepare.returncode == 0, prepare.stderr
    build = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-c", "book", "-q", ".", "build/book/html"],
                           cwd=checkout, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    return checkout


def links(page: Path) -> list[str]:
    return [unescape(href) for href in re.findall(r'<a[^>]+href="([^"]+)"', page.read_text())]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_every_lesson_page_opens_in_colab_and_binder(published, lesson):
    page = published / "build" / "book" / "html" / "notebooks" / f"{lesson.stem}.html"
    hrefs = links(page)
    owner_name = STAND_IN.removeprefix("https://github.com/")
    colab = [h for h in hrefs if h.startswith("https://colab.research.google.com/")]
    binder = [h for h in hrefs if h.startswith("https://mybinder.org/")]
    assert colab and binder, (lesson.name, hrefs)
    # Colab's GitHub address: /github/OWNER/NAME/blob/BRANCH/PATH, the lesson pushed to that branch.
    match = re.fullmatch(rf"https://colab\.research\.google\.com/github/{owner_name}/blob/([\w.-]+)/(.+)", colab[0])
    assert match, colab[0]
    workflow = (ROOT / ".github" / "workflows" / "book.yml").read_text()
    assert f"git push --force origin {match.group(1)}" in workflow, "Colab opens a branch the workflow does not push"
    assert (published / match.group(2)).is_file() and match.group(2) == f"notebooks/{lesson.name}"
    # Binder's: /v2/gh/OWNER/NAME/BRANCH?labpath=PATH, built from the repository's environment.yml.
    match = re.fullmatch(rf"https://mybinder\.org/v2/gh/{owner_name}/main\?labpath=(.+)", binder[0])
    assert match and unquote(match.group(1)) == f"notebooks/{lesson.name}", binder[0]
    assert (published / "environment.yml").is_file()


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_the_published_notebook_clones_the_same_repository_and_the_page_hides_that_cell(published, lesson):
    notebook = json.loads((published / "notebooks" / lesson.name).read_text())
    setup = notebook["cells"][1]
    assert "colab-setup" in setup["metadata"]["tags"]
    assert f'REPOSITORY = "{STAND_IN}"' in "".join(setup["source"])
    download = published / "build" / "book" / "html" / "_sources" / "notebooks" / lesson.name
    assert json.loads(download.read_text()) == notebook
    page = (published / "build" / "book" / "html" / "notebooks" / f"{lesson.stem}.html").read_text()
    assert "_set_up_hosted_notebook" not in page


def test_the_workflow_makes_the_links_from_its_own_repository_before_the_book():
    book = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    runs = [s.get("run", "") for job in book["jobs"].values() for s in job["steps"]]
    (prepare,) = [i for i, run in enumerate(runs) if "tools/add_colab_cell.py" in run]
    assert '--repository "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY"' in runs[prepare]
    assert prepare < runs.index("make book")
    assert "OWNER/REPO" not in "".join(runs)
