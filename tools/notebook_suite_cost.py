"""How long the notebook tests take, against a notebook that only imports torch, in one run.

    python tools/notebook_suite_cost.py [--repeats 1]

Both are run the way `make test` runs notebooks (pytest with nbval, a fresh kernel each); the
ratio says how much the lessons add to the unavoidable cost of starting a kernel and importing
torch. Goal: at most 25x. Per-notebook times say where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"), "-q"]


def nbval_seconds(*paths: Path) -> float:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", *map(str, paths), *NBVAL], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"nbval failed on {', '.join(p.name for p in paths)}:\n{out.stdout[-2000:]}")
    return time.perf_counter() - start


def import_only_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "import_torch_only.ipynb"
    nbformat.write(nb, path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    opts = parser.parse_args()
    lessons = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    with tempfile.TemporaryDirectory() as tmp:
        baseline_nb = import_only_notebook(Path(tmp))
        baseline = statistics.median(nbval_seconds(baseline_nb) for _ in range(opts.repeats))
        per_notebook = {nb.name: nbval_seconds(nb) for nb in lessons}
        suite = statistics.median(nbval_seconds(*lessons) for _ in range(opts.repeats))
    for name, seconds in per_notebook.items():
        print(f"{name:<28} {seconds:7.1f} s  ({seconds / baseline:5.1f}x the import-only notebook)")
    ratio = suite / baseline
    print(f"import-only notebook {baseline:.1f} s; whole suite {suite:.1f} s; ratio {ratio:.1f}x "
          f"(goal at most 25x: {'met' if ratio <= 25 else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
