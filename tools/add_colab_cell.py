"""Put "Open in Colab" and Binder links and the set-up cell (tools/colab_cell.py) at the top of every lesson.

    python tools/add_colab_cell.py [--repository URL] [--branch NAME] [notebooks/NN_topic.ipynb ...]

The Pages workflow (.github/workflows/book.yml) runs it on its own checkout before building the book,
with the address of the repository it runs in, and pushes the result to the branch ``colab``, which
the Colab links open: the committed lessons never hold the cells, and nobody types an address.

Idempotent: a lesson that has them gets them updated in place; one that has not gets a Markdown
cell of links (tag ``colab-links``) and the code cell (tags ``colab-setup`` and ``remove-cell``,
which the book leaves out) inserted first. The cell prints nothing outside Colab and Binder, so the
stored outputs stay true: it is stored as executed first (execution count 1, no output) and the
other cells' counts move up by one, as a run from a fresh kernel would number them.

The repository's address is ``--repository``, else pyproject.toml's ``[project.urls] Repository``.
Colab opens the lesson from ``--branch`` (default ``colab``), Binder builds ``main``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CELL_SOURCE = ROOT / "tools" / "colab_cell.py"
LINKS_TAG = "colab-links"
SETUP_TAG = "colab-setup"
PLACEHOLDER = "https://github.com/OWNER/REPO"
COLAB_BRANCH = "colab"  # where the workflow pushes the lessons with these cells
BINDER_BRANCH = "main"  # Binder builds the project itself (environment.yml), lessons as committed
ADDRESS = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+")


def checked_address(url: str, where: str) -> str:
    """``url`` without a trailing slash or ``.git``, if it is a GitHub repository's address (Colab and
    Binder's ``gh`` provider open only those) other than the placeholder."""
    url = url.rstrip("/").removesuffix(".git")
    if not ADDRESS.fullmatch(url) or url == PLACEHOLDER:
        raise SystemExit(f"{where} = {url!r}: expected the project's https://github.com/OWNER/NAME address")
    return url


def repository_url(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The GitHub address in ``[project.urls] Repository``, without a trailing slash or ``.git``."""
    urls = tomllib.loads(pyproject.read_text())["project"].get("urls", {})
    return checked_address(urls.get("Repository", ""), f"[project.urls] Repository in {pyproject}")


def setup_source(repository: str) -> str:
    """tools/colab_cell.py with the repository's address filled in."""
    source = CELL_SOURCE.read_text()
    line = re.compile(r'^REPOSITORY = "[^"]*"', re.MULTILINE)
    assert len(line.findall(source)) == 1, f"{CELL_SOURCE} must set REPOSITORY once"
    return line.sub(f'REPOSITORY = "{repository}"', source).rstrip("\n")


def links_source(repository: str, notebook: str, colab_branch: str = COLAB_BRANCH) -> str:
    """Plain links (no badge images: the book loads nothing from other sites)."""
    owner_name = repository.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{owner_name}/blob/{colab_branch}/notebooks/{notebook}"
    binder = f"https://mybinder.org/v2/gh/{owner_name}/{BINDER_BRANCH}?labpath=notebooks%2F{notebook}"
    return (f"[Open in Colab]({colab}) · [Open in Binder]({binder}) · On Colab or Binder, run the next cell "
            "first (on your own machine it does nothing). On Colab, `my_work/` lasts as long as the runtime: "
            f"to keep it, see [Colab and Binder]({repository}/blob/{BINDER_BRANCH}/docs/install.md#colab-and-binder).")


def tagged(nb, tag: str):
    return next((cell for cell in nb.cells if tag in cell.metadata.get("tags", [])), None)


def add_cells(nb, repository: str, notebook: str, colab_branch: str = COLAB_BRANCH) -> bool:
    """Insert or update the two cells in ``nb``; True if anything changed."""
    links, setup = links_source(repository, notebook, colab_branch), setup_source(repository)
    old_links, old_setup = tagged(nb, LINKS_TAG), tagged(nb, SETUP_TAG)
    if old_links is not None and old_setup is not None:
        changed = (old_links.source, old_setup.source) != (links, setup)
        old_links.source, old_setup.source = links, setup
        return changed
    nb.cells = [cell for cell in nb.cells if cell not in (old_links, old_setup)]
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.execution_count is not None:
            cell.execution_count += 1
            for output in cell.outputs:
                if output.get("execution_count") is not None:
                    output["execution_count"] += 1
    link_cell = nbformat.v4.new_markdown_cell(links, metadata={"tags": [LINKS_TAG]})
    setup_cell = nbformat.v4.new_code_cell(setup, metadata={"tags": [SETUP_TAG, "remove-cell"]})
    setup_cell.execution_count = 1
    link_cell.id, setup_cell.id = LINKS_TAG, SETUP_TAG  # fixed ids: a rerun changes nothing
    nb.cells[:0] = [link_cell, setup_cell]
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", help="https://github.com/OWNER/NAME (default: pyproject.toml's)")
    parser.add_argument("--branch", default=COLAB_BRANCH, help=f"the branch Colab opens (default {COLAB_BRANCH})")
    parser.add_argument("notebooks", nargs="*", type=Path,
                        default=sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")))
    args = parser.parse_args(argv)
    repository = checked_address(args.repository, "--repository") if args.repository else repository_url()
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if add_cells(nb, repository, path.name, args.branch):
            nbformat.write(nb, path)
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
