"""Sphinx configuration of the book: `make book` builds the lessons, with their stored outputs, and
the pages of docs/ into build/book/html, a static site that loads nothing from the internet.

The source directory is the repository root (so the README's links to docs/ and notebooks/ work
unchanged in the book); this file and the table of contents live in book/.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes

ROOT = Path(__file__).resolve().parent.parent

project = "Learn PyTorch DDP by running it"
author = "the ddp-lib authors"
release = re.search(r'__version__ = "([^"]+)"', (ROOT / "ddp_lib" / "__init__.py").read_text()).group(1)

extensions = ["myst_nb", "sphinx_external_toc", "sphinxcontrib.katex", "sphinx_copybutton"]

external_toc_path = "book/_toc.yml"
external_toc_exclude_missing = True
# Only what the book shows is read: the rest of the repository (tests, tools, .venv) is not a page.
include_patterns = ["README.md", "docs/*.md", "notebooks/[0-9][0-9]*_*.ipynb", "book/solutions.md"]
exclude_patterns = [".venv", "build", "**/.ipynb_checkpoints"]

# The lessons are shown as committed, outputs included: never executed while building.
nb_execution_mode = "off"
# Math is written as JupyterLab shows it, `$...$`; elsewhere in the lessons `$` appears only in code.
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
# Math typeset in the reader's browser by the site's own copy of KaTeX (the one bundled with
# sphinxcontrib-katex), as MathML, which browsers lay out themselves: no stylesheet or font to fetch.
# (Its prerendering at build time needs Node.js, and its server start races on a busy machine.)
katex_prerender = False
katex_options = '{output: "mathml", throwOnError: false}'
katex_css_path = "katex-math.css"  # the extension's own (its default is KaTeX's stylesheet from a CDN)

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "show_toc_level": 2,
    # No launch buttons, repository buttons or analytics: each would load or link to a service.
    "use_download_button": True,
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
# Each page's source is copied beside it, under its own name (no ".txt" added): the theme's download
# button offers the lesson's .ipynb, stored outputs included.
html_copy_source = True
html_sourcelink_suffix = ""
# The copy button leaves out the prompts of shell and Python sessions, so what is pasted runs.
copybutton_prompt_text = r"\$ |>>> |\.\.\. "
copybutton_prompt_is_regexp = True
# The Markdown pages link to source files (ddp_lib/..., tools/...) that are not pages of the book.
suppress_warnings = ["myst.xref_missing"]

# The worked solutions: book/solutions.md gets one section per file of ddp_lib/exercises/solutions/
# (a new lesson's solution appears without an edit), and where a page names a solution file in
# code (`ddp_lib/exercises/solutions/lesson04.py`), the name becomes a link to its section.
SOLUTIONS_PAGE = "book/solutions"
SOLUTION_FILE = re.compile(r"ddp_lib/exercises/solutions/(lesson\w+)\.py")


def solution_sections() -> str:
    sections = []
    for path in sorted((ROOT / "ddp_lib" / "exercises" / "solutions").glob("lesson*.py")):
        sections.append(f"\n({path.stem})=\n## Lesson {path.stem.removeprefix('lesson')}: `{path.name}`\n\n"
                        f"```{{literalinclude}} ../ddp_lib/exercises/solutions/{path.name}\n:language: python\n```\n")
    return "".join(sections)


def add_solutions(app, docname: str, source: list[str]) -> None:
    if docname == SOLUTIONS_PAGE:
        source[0] += solution_sections()


def link_solutions(app, doctree, docname: str) -> None:
    for literal in list(doctree.findall(nodes.literal)):
        match = SOLUTION_FILE.fullmatch(literal.astext())
        if match and docname != SOLUTIONS_PAGE and isinstance(literal.parent, nodes.TextElement):
            uri = app.builder.get_relative_uri(docname, SOLUTIONS_PAGE) + "#" + match.group(1)
            literal.replace_self(nodes.reference("", "", literal.deepcopy(), refuri=uri, internal=True))


# A lesson's "Deeper: ..." sections hold torch's source and edge cases: JupyterLab opens them folded
# (their heading cell's jp-MarkdownHeadingCollapsed), and so does the book. The heading stays a heading
# (in the page's contents, with its anchor); what follows it, up to the section's end, goes into an
# HTML <details> element, which the browser shows closed until the reader opens it. No script needed.
DEEPER_HEADING = "Deeper:"
DEEPER_OPEN = '<details class="deeper">\n<summary>Open this deeper section</summary>\n'
DEEPER_CLOSE = "</details>\n"


def fold_deeper_sections(app, doctree) -> None:
    for section in list(doctree.findall(nodes.section)):
        title = section.children[0] if section.children else None
        if isinstance(title, nodes.title) and title.astext().startswith(DEEPER_HEADING):
            section.insert(1, nodes.raw("", DEEPER_OPEN, format="html"))
            section.append(nodes.raw("", DEEPER_CLOSE, format="html"))


def setup(app):
    app.connect("source-read", add_solutions)
    app.connect("doctree-read", fold_deeper_sections)
    app.connect("doctree-resolved", link_solutions)
