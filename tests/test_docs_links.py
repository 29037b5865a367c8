"""The README stays a short page for learners that links every page of docs/, and no link in the
README or docs/ points at a file or heading that is not there; every link to a glossary term, from
the lessons too, lands on an anchor the glossary has; and every link to a section of a lesson, from
the README, docs/ or a lesson, names a heading that lesson has."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_LIMIT = 10_500  # bytes: "at most about 10 KB"; the rest belongs in docs/


HTML_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
GLOSSARY = ROOT / "docs" / "glossary.md"


def anchors(page: Path) -> set[str]:
    """GitHub's and myst's anchor for each heading (lower case, punctuation dropped, spaces to dashes),
    and each id of an `<a id="...">` (the glossary's terms)."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
        found.update(HTML_ANCHOR.findall(line))
    return found


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_bytes()) <= README_LIMIT


def test_every_docs_page_is_linked_from_the_readme():
    linked = {target.split("#")[0] for target in LINK.findall((ROOT / "README.md").read_text())}
    assert {f"docs/{page.name}" for page in PAGES[1:]} <= linked


def test_every_relative_link_resolves():
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            destination = (page.parent / path).resolve() if path else page
            assert destination.exists(), f"{page.name}: {target}"
            if anchor and destination.suffix == ".md":
                assert anchor in anchors(destination), f"{page.name}: {target}"


def notebook_anchors(notebook: Path) -> set[str]:
    """The book's anchor (myst, levels 1 to 3) for each heading in a notebook's markdown cells."""
    import json

    found = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            level = len(line) - len(line.lstrip("#"))
            if 1 <= level <= 3 and line[level:level + 1] == " ":
                title = HTML_ANCHOR.sub("", line[level:]).strip().lower()
                found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def explicit_anchors(notebook: Path) -> set[str]:
    """The ids of the `<a id="...">` anchors in a notebook's markdown cells."""
    import json

    cells = json.loads(notebook.read_text())["cells"]
    return {anchor for cell in cells if cell["cell_type"] == "markdown"
            for anchor in HTML_ANCHOR.findall("".join(cell["source"]))}


def test_every_lesson_link_in_the_question_map_names_a_heading_that_exists():
    page = ROOT / "docs" / "questions.md"
    lesson_links = [t for t in LINK.findall(page.read_text()) if ".ipynb" in t]
    assert len(lesson_links) >= 8
    for target in lesson_links:
        path, _, anchor = target.partition("#")
        notebook = (page.parent / path).resolve()
        assert notebook.exists(), target
        assert anchor, f"{target}: link a section by its heading, not the whole lesson"
        assert anchor in notebook_anchors(notebook), target


def glossary_links() -> list[tuple[str, str, str]]:
    """(where, link text, target) of every link to the glossary in the README, docs/ and the lessons'
    markdown cells."""
    import json

    texts = [(page.name, page.read_text()) for page in PAGES]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for number, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            if cell["cell_type"] == "markdown":
                texts.append((f"{notebook.name} cell {number}", "".join(cell["source"])))
    link = re.compile(r"\[((?:[^\]\[]|\[[^\]]*\])*)\]\(((?:\.\./)?(?:docs/)?glossary\.md(?:#[^)\s]*)?)\)")
    return [(where, text, target) for where, body in texts for text, target in link.findall(body)]


def test_every_glossary_link_lands_on_its_term():
    links = glossary_links()
    assert len(links) >= 300
    terms = anchors(GLOSSARY)
    for where, text, target in links:
        _, _, anchor = target.partition("#")
        if text.lower() == "glossary":  # a link to the page itself, by its name
            continue
        assert anchor, f"{where}: [{text}]({target}) names a term: link its anchor, glossary.md#..."
        assert anchor in terms, f"{where}: [{text}]({target}): no such anchor in docs/glossary.md"


def lesson_links() -> list[tuple[str, str, Path]]:
    """(where, target, destination) of every relative link in the README, docs/ and the lessons'
    markdown cells whose destination is a lesson, or a section of the same lesson."""
    import json

    sources = [(page.name, page.read_text(), page) for page in PAGES]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        sources += [(f"{notebook.name} cell {i}", "".join(cell["source"]), notebook)
                    for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"]
    found = []
    for where, text, origin in sources:
        for target in LINK.findall(text):
            path, _, anchor = target.partition("#")
            if re.match(r"^[a-z]+:", target) or not anchor:
                continue
            destination = (origin.parent / path).resolve() if path else origin
            if destination.suffix == ".ipynb":
                found.append((where, target, destination))
    return found


def test_every_link_to_a_lesson_section_names_a_heading_that_exists():
    links = lesson_links()
    assert len(links) >= 20
    missing = [f"{where}: {target}" for where, target, destination in links
               if not destination.exists() or target.partition("#")[2] not in notebook_anchors(destination)]
    assert not missing, missing


# JupyterLab scrolls to a link's section only through an element whose id is the link's anchor, and
# the ids it gives headings keep their case and punctuation ("Deeper:-stores-in-torch"), so a linked
# heading carries the book's and GitHub's anchor explicitly, at the end of its line.
def test_every_linked_lesson_section_has_an_anchor_jupyterlab_finds():
    links = lesson_links()
    missing = sorted({f"{destination.name}: the heading of #{target.partition('#')[2]} "
                      f"(linked from {where}) ends without <a id=\"{target.partition('#')[2]}\"></a>"
                      for where, target, destination in links
                      if destination.exists() and target.partition("#")[2] not in explicit_anchors(destination)})
    assert not missing, "\n".join(missing)

