"""Execute notebooks in place from a fresh kernel, top to bottom, and normalise their metadata.

    python tools/execute_notebooks.py notebooks/*.ipynb

This is how notebooks are committed: with outputs, execution counts 1, 2, 3, ..., the generic
``python3`` kernelspec, and no metadata that changes from machine to machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def normalise(nb: nbformat.NotebookNode) -> None:
    nb.metadata = nbformat.from_dict({
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python", "pygments_lexer": "ipython3"},
    })
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # per-cell timestamps
        cell.metadata.pop("widgets", None)


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    normalise(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - start


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: executed in {execute(Path(name)):.1f} s", flush=True)
