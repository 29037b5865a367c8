"""Sphinx configuration of the book: `make book` builds the lessons, with their stored outputs, and
the pages of docs/ into build/book/html, a static site that loads nothing from the internet.

The source directory is the repository root (so the README's links to docs/ and notebooks/ work
unchanged in the book); this file and the table of contents live in book/.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

project = "Learn PyTorch DDP by running it"
author = "the ddp-lib authors"
release = re.search(r'__version__ = "([^"]+)"', (ROOT / "ddp_lib" / "__init__.py").read_text()).group(1)

extensions = ["myst_nb", "sphinx_external_toc", "sphinx.ext.imgmath"]

external_toc_path = "book/_toc.yml"
external_toc_exclude_missing = True
# Only what the book shows is read: the rest of the repository (tests, tools, .venv) is not a page.
include_patterns = ["README.md", "docs/*.md", "notebooks/[0-9][0-9]*_*.ipynb"]
exclude_patterns = [".venv", "build", "**/.ipynb_checkpoints"]

# The lessons are shown as committed, outputs included: never executed while building.
nb_execution_mode = "off"
# The lessons' Markdown is CommonMark with tables; `$` is a shell variable in them, not math.
myst_enable_extensions: list[str] = []
myst_heading_anchors = 3
# Math as images made at build time (LaTeX and dvipng, where installed) instead of MathJax from a
# CDN: the pages load nothing from the internet. The lessons hold no math today.
html_math_renderer = "imgmath"

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "show_toc_level": 2,
    # No launch buttons, repository buttons or analytics: each would load or link to a service.
    "use_download_button": True,
    "use_fullscreen_button": False,
}
html_show_sourcelink = False
html_copy_source = False
# The Markdown pages link to source files (ddp_lib/..., tools/...) that are not pages of the book.
suppress_warnings = ["myst.xref_missing"]
