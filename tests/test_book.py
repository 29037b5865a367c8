"""`make book` builds a static site that loads nothing from the internet and holds every lesson, with
every image stored in it, its math typeset, copy buttons, a download of its notebook and links to the
worked solutions, and every page of docs/.

Needs the `book` extra (Sphinx, myst-nb): `make book` installs it into .venv, and .ci/run runs
`make book` before `make test-slow`, so there this test runs; where the extra is not installed it skips.
It builds the book itself, into a temporary directory, from the files as they are now (about 15 s).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html import unescape
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


def test_each_lesson_is_titled_like_the_others_in_the_navigation(site):
    index = (site / "README.html").read_text()
    for notebook in LESSONS:
        titles = re.findall(rf'href="notebooks/{notebook.stem}.html">([^<]*)<', index)
        number = notebook.stem.split("_", 1)[0]
        assert titles and titles[0].startswith(f"{number} · "), (notebook.name, titles)


def test_each_lesson_page_downloads_its_own_notebook(site):
    for notebook in LESSONS:
        page = site / "notebooks" / f"{notebook.stem}.html"
        links = re.findall(r'<a href="([^"]+\.ipynb)"', page.read_text())
        assert links, f"{page.name} offers no .ipynb download"
        for link in links:
            downloaded = (page.parent / link).resolve()
            assert downloaded.is_file(), (page.name, link)
            assert json.loads(downloaded.read_text()) == json.loads(notebook.read_text()), (page.name, link)


def test_code_blocks_have_copy_buttons(site):
    for page in [site / "notebooks" / f"{n.stem}.html" for n in LESSONS] + [site / "docs" / "install.html"]:
        html = page.read_text()
        scripts = [src.split("?")[0] for src in resources(page).loaded]
        for script in ("copybutton.js", "clipboard.min.js"):
            local = [src for src in scripts if src.endswith(f"_static/{script}")]
            assert local and (page.parent / local[0]).is_file(), (page.name, script)
        # copybutton.js puts its button on every block that this selector finds (its default)
        assert "COPYBUTTON_SELECTOR = 'div.highlight pre'" in (site / "_static" / "copybutton.js").read_text()
        assert '<div class="highlight"><pre>' in html, page.name


MATH = re.compile(r'<(?:span|div) class="math[^"]*">\s*\\[(\[](.*?)\\[)\]]', re.DOTALL)


def test_math_is_typeset_by_the_sites_own_katex(site):
    page = site / "notebooks" / "08_performance.html"
    html = page.read_text()
    expressions = [unescape(latex) for latex in MATH.findall(html)]
    assert r"t(S) = \alpha + S / \beta" in expressions, expressions
    assert "$" not in re.sub(r"<(code|pre)\b.*?</\1>", "", html, flags=re.DOTALL).split('<article', 1)[1].split(
        "</article>", 1)[0], "a $...$ left as text"
    scripts = [src.split("?")[0] for src in resources(page).loaded]
    for script in ("katex.min.js", "auto-render.min.js", "katex_autorenderer.js"):
        assert (page.parent / f"../_static/{script}").is_file() and f"../_static/{script}" in scripts, script
    assert 'output: "mathml"' in (site / "_static" / "katex_autorenderer.js").read_text()
    if shutil.which("node") is None:
        pytest.skip("typesetting each formula needs Node.js; the site's KaTeX and its settings are in place")
    # What the reader's browser does: the site's KaTeX typesets each formula, as MathML.
    script = ("const katex = require(process.argv[1]); const formulas = JSON.parse(process.argv[2]);"
              "console.log(JSON.stringify(formulas.map(f => katex.renderToString(f, "
              "{output: 'mathml', throwOnError: true}))));")
    typeset = subprocess.run(["node", "-e", script, str(site / "_static" / "katex.min.js"), json.dumps(expressions)],
                             capture_output=True, text=True, timeout=60)
    assert typeset.returncode == 0, typeset.stderr[-2000:]
    for latex, mathml in zip(expressions, json.loads(typeset.stdout), strict=True):
        assert "<math" in mathml and "katex-error" not in mathml, (latex, mathml[:300])


def test_every_solution_a_lesson_names_links_to_its_code(site):
    solutions = site / "book" / "solutions.html"
    solutions_html = solutions.read_text()
    named = 0
    for notebook in LESSONS:
        page = site / "notebooks" / f"{notebook.stem}.html"
        for stem in sorted(set(re.findall(r"ddp_lib/exercises/solutions/(lesson\w+)\.py", notebook.read_text()))):
            named += 1
            assert f'href="../book/solutions.html#{stem}"' in page.read_text(), (notebook.name, stem)
            assert f'id="{stem}"' in solutions_html, stem
            first_line = (ROOT / "ddp_lib" / "exercises" / "solutions" / f"{stem}.py").read_text().splitlines()[0]
            assert unescape(re.sub(r"<[^>]+>", "", solutions_html)).count(first_line.strip('"')) >= 1, stem
    assert named >= 5, "the lessons name fewer worked solutions than expected"


def deeper_headings(notebook: Path) -> list[str]:
    """The "Deeper: ..." headings of a lesson, as its markdown cells write them."""
    cells = json.loads(notebook.read_text())["cells"]
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
               for c in cells if c["cell_type"] == "markdown"]
    # a linked heading ends with its anchor, <a id="..."></a>, which is no part of its text
    return [re.sub(r'\s*<a id="[^"]*"></a>', "", m.group(1))
            for source in sources for m in re.finditer(r"^#{1,6} (Deeper: .*)$", source, re.MULTILINE)]


def plain(html: str) -> str:
    """A heading's text as its Markdown writes it: no tags, entities or typographic quotes."""
    text = unescape(re.sub(r"<[^>]+>", "", html)).strip()
    return text.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}))


SECTION_TAG = re.compile(r"<(/?)section\b[^>]*>")
# A section's opening: its tag, the anchor myst adds, and its heading (text, then the permalink).
SECTION_HEADING = re.compile(r'<section\b[^>]*>\s*(?:<span id="[^"]*"></span>)?<h[1-6]>(.*?)<a class="headerlink"',
                             re.DOTALL)
SECTION_HEAD = re.compile(r'^<section\b[^>]*>\s*(?:<span id="[^"]*"></span>)?<h[1-6]>.*?</h[1-6]>\s*', re.DOTALL)


def section_at(html: str, start: int) -> str:
    """The HTML of the <section> element that opens at ``start``, nested sections included."""
    depth = 0
    for tag in SECTION_TAG.finditer(html, start):
        depth += -1 if tag.group(1) else 1
        if depth == 0:
            return html[start:tag.end()]
    raise AssertionError("a <section> that never closes")


def test_each_deeper_section_is_folded_in_the_book(site):
    folded = 0
    for notebook in LESSONS:
        headings = deeper_headings(notebook)
        html = (site / "notebooks" / f"{notebook.stem}.html").read_text()
        for heading in headings:
            # the section whose heading (h1-h6, text before its permalink) is this Deeper heading
            starts = [m.start() for m in SECTION_HEADING.finditer(html)
                      if plain(m.group(1)) == heading.replace("`", "")]
            assert len(starts) == 1, (notebook.name, heading, len(starts))
            section = section_at(html, starts[0])
            # the heading, then everything else of the section inside one <details>, closed by default
            body = SECTION_HEAD.sub("", section)
            assert body.startswith('<details class="deeper">') and " open" not in body.split(">", 1)[0], \
                (notebook.name, heading, body[:200])
            assert body.removesuffix("</section>").rstrip().endswith("</details>"), (notebook.name, heading)
            folded += 1
    # the headings that are not Deeper ones stay open
    assert sum(page.read_text().count('<details class="deeper">')
               for page in (site / "notebooks").glob("*.html")) == folded
    assert folded >= 1, "no lesson has a Deeper section to fold"


def test_every_glossary_link_of_a_lesson_lands_on_its_term(site):
    # The lessons link docs/glossary.md#term; the book keeps the fragment, and the glossary page has
    # the term's <a id>. (The page's own navigation links the page without one.)
    ids = set(re.findall(r'<a id="([^"]+)"></a>', (site / "docs" / "glossary.html").read_text()))
    assert len(ids) >= 60
    for notebook in LESSONS:
        page = (site / "notebooks" / f"{notebook.stem}.html").read_text()
        fragments = re.findall(r'href="\.\./docs/glossary\.html#([^"]+)"', page)
        assert fragments, notebook.name
        assert set(fragments) <= ids, (notebook.name, set(fragments) - ids)
