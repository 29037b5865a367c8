"""Execute notebooks in place from a fresh kernel, top to bottom, and normalise their metadata.

    python tools/execute_notebooks.py notebooks/*.ipynb

This is how notebooks are committed: with outputs, execution counts 1, 2, 3, ..., the generic
``python3`` kernelspec, the kernel's own ``language_info``, no other metadata, and a progress bar's
many redraws stored as the one line Jupyter shows.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


# A line's text up to a carriage return that more text on the same line overwrites.
_OVERWRITTEN = re.compile(r"[^\n]*\r(?=[^\n])")


def redraws_resolved(outputs: list) -> list:
    """Stream outputs as Jupyter shows them: a piece that redraws a line with carriage returns
    (a progress bar, sent as many pieces) joined to the stream before it, and each redrawn line
    kept in its last state only."""
    kept = []
    for out in outputs:
        if (out.get("output_type") == "stream" and kept and kept[-1].get("output_type") == "stream"
                and kept[-1]["name"] == out["name"] and _OVERWRITTEN.search(kept[-1]["text"][-1:] + out["text"])):
            kept[-1]["text"] += out["text"]
        else:
            kept.append(out)
    for out in kept:
        if out.get("output_type") == "stream":
            out["text"] = _OVERWRITTEN.sub("", out["text"])
    return kept


def normalise(nb: nbformat.NotebookNode) -> None:
    # language_info stays exactly as the kernel reported it: JupyterLab writes the kernel's into an
    # open notebook and marks it modified unless the two are deep-equal. Only its version differs
    # between Pythons, and the lessons' Jupyter server fills that in (ddp_lib/lab_contents.py).
    nb.metadata = nbformat.from_dict({
        "kernelspec": KERNELSPEC,
        "language_info": dict(nb.metadata.get("language_info", {})),
    })
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # per-cell timestamps
        cell.metadata.pop("widgets", None)
        if cell.cell_type == "code":
            cell.outputs = redraws_resolved(cell.outputs)
            if cell.source.startswith("%%writefile"):
                # Stored as a fresh clone shows it: the file does not exist there yet.
                for out in cell.outputs:
                    if out.get("output_type") == "stream":
                        out["text"] = re.sub(r"^Overwriting ", "Writing ", out["text"], flags=re.M)


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
