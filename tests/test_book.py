"""`make book` builds a static site that loads nothing from the internet and holds every lesson, with
every image stored in it, and every page of docs/.

Needs the `book` extra (Sphinx, myst-nb): `make book` installs it into .venv, and .ci/run runs
`make book` before `make test`, so there this test runs; where the extra is not installed it skips.
It builds the book itself, into a temporary directory, from the files as they are now (about 15 s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the book extra is not installed: run `make book` once")
pytest.importorskip("myst_nb", reason="the book extra is not installed: run `make book` once")

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
# A URL that leaves the site: a scheme (http:, https:, data: is inline and allowed) or protocol-relative.
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


class Resources(HTMLParser):
    """What a page loads: scripts, stylesheets and other links, images."""

    def __init__(self):
        super().__init__()
        self.loaded: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.loaded.append(attrs["src"])
        elif tag == "link" and attrs.get("href") and attrs.get("rel") != "canonical":
            self.loaded.append(attrs["href"])
        elif tag in ("img", "source", "iframe", "embed") and attrs.get("src"):
            self.loaded.append(attrs["src"])
            if tag == "img":
                self.images.append(attrs["src"])


def resources(page: Path) -> Resources:
    parser = Resources()
    parser.feed(page.read_text())
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("book") / "html"
    build = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-c", "book", "-q", ".", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    return out


def test_no_page_loads_anything_from_the_internet(site):
    pages = sorted(site.rglob("*.html"))
    assert pages
    for page in pages:
        external = [url for url in resources(page).loaded if EXTERNAL.match(url)]
        assert external == [], f"{page.relative_to(site)} loads {external}"
    for css in site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", css.read_text(errors="replace")), css
        assert "@import url(http" not in css.read_text(errors="replace"), css


def stored_images(notebook: Path) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    return sum(1 for cell in cells if cell["cell_type"] == "code" for output in cell.get("outputs", [])
               if {"image/png", "image/svg+xml", "image/jpeg"} & set(output.get("data", {})))


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda p: p.name)
def test_every_lesson_is_a_page_with_every_stored_image(site, notebook):
    page = site / "notebooks" / f"{notebook.stem}.html"
    assert page.is_file(), f"no page for {notebook.name}"
    images = resources(page).images
    assert len(images) >= stored_images(notebook), (notebook.name, images)
    for src in images:
        if not src.startswith("data:"):
            assert (page.parent / src).resolve().is_file(), (notebook.name, src)


def test_the_lessons_are_in_order_in_the_navigation(site):
    index = (site / "README.html").read_text()
    positions = [index.find(f"notebooks/{notebook.stem}.html") for notebook in LESSONS]
    assert -1 not in positions and positions == sorted(positions), positions


def test_every_docs_page_is_there_and_searchable(site):
    for doc in DOCS:
        assert (site / "docs" / f"{doc.stem}.html").is_file(), doc.name
    assert (site / "search.html").is_file()
    index = (site / "searchindex.js").read_text()
    for notebook in LESSONS:
        assert f"notebooks/{notebook.stem}" in index, notebook.name
    assert (site / "index.html").is_file()  # the address a browser opens first
