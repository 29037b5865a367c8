"""Where the notebooks' time goes: each lesson's Run All, and the suite under nbval against a
notebook that only imports torch, in one run.

    python tools/notebook_suite_cost.py [--repeats 1] [NOTEBOOK ...]

Per lesson: Run All in a fresh kernel (as a learner's "Restart Kernel and Run All"), with the
seconds split by what each cell does, judged from its source: cells that run torchrun, cells
that start ranks (a launch, a checker, ``mp.spawn``), cells that draw a plot, and the rest
(kernel start, imports and compute). Goal: at most 30 s per lesson.

Suite: the notebook tests as `make test-lessons` runs them (pytest with nbval, a fresh kernel each, on
``--jobs`` processes as ``make test-lessons``'s JOBS) against the import-only notebook run the same way,
timed side by side. Goal: at most 12x.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg"), "-q"]
LESSON_GOAL_S = 30.0
SUITE_GOAL_RATIO = 12.0

# The first kind whose pattern a cell's source matches; order matters (a torchrun cell that
# also plots counts as torchrun).
KINDS = (
    ("torchrun", re.compile(r"torchrun|run_torchrun")),
    ("starting ranks",
     re.compile(r"\brun_ranks\(|\bspawn\(|\blaunch\(|\bcheck_\w+\(|start_processes|\bbench_\w+\(|run_worker")),
    ("plotting", re.compile(r"\bplot_\w+\(|\bplt\.|\.plot\(")),
)
OTHER = "other"  # kernel start, imports, compute


def kind_of(source: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(source)), OTHER)


def nbval_seconds(*paths: Path, jobs: int = 1) -> float:
    parallel = ["-n", str(jobs), "--dist", "loadfile"] if jobs > 1 else []
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", *parallel, *map(str, paths), *NBVAL], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"nbval failed on {', '.join(p.name for p in paths)}:\n{out.stdout[-2000:]}")
    return time.perf_counter() - start


def run_all(path: Path) -> tuple[float, dict[str, float]]:
    """Run All in a fresh kernel; the wall time, and the seconds per kind of cell."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - start
    shares = dict.fromkeys([kind for kind, _ in KINDS] + [OTHER], 0.0)
    for cell in nb.cells:
        timing = cell.metadata.get("execution", {})
        if cell.cell_type == "code" and "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            began = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
            ended = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
            shares[kind_of(cell.source)] += (ended - began).total_seconds()
    shares[OTHER] += wall - sum(shares.values())  # kernel start and messaging are the rest
    return wall, shares


def import_only_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "import_torch_only.ipynb"
    nbformat.write(nb, path)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="suite and baseline runs, median taken")
    parser.add_argument("--jobs", type=int, default=2, help="pytest processes, as make test-lessons (default 2)")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every lesson")
    opts = parser.parse_args()
    lessons = opts.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

    kinds = [kind for kind, _ in KINDS] + [OTHER]
    print(f"{'lesson (Run All, fresh kernel)':<32}{'seconds':>8}  " + "  ".join(f"{k:>14.14}" for k in kinds))
    over = []
    for path in lessons:
        wall, shares = run_all(path)  # in memory: the notebook file is not rewritten
        if wall > LESSON_GOAL_S:
            over.append(path.name)
        print(f"{path.name:<32}{wall:8.1f}  " + "  ".join(f"{100 * shares[k] / wall:13.0f}%" for k in kinds))
    print(f"goal: every lesson at most {LESSON_GOAL_S:g} s: "
          + ("met" if not over else f"missed by {', '.join(over)}"))

    with tempfile.TemporaryDirectory() as tmp:
        baseline_nb = import_only_notebook(Path(tmp))
        baseline, suite = [], []
        for _ in range(opts.repeats):  # interleaved, so load changes hit both sides alike
            baseline.append(nbval_seconds(baseline_nb, jobs=opts.jobs))
            suite.append(nbval_seconds(*lessons, jobs=opts.jobs))
    ratio = statistics.median(suite) / statistics.median(baseline)
    print(f"import-only notebook {statistics.median(baseline):.1f} s; suite under nbval "
          f"{statistics.median(suite):.1f} s on {opts.jobs} process(es); ratio {ratio:.1f}x "
          f"(goal at most {SUITE_GOAL_RATIO:g}x: {'met' if ratio <= SUITE_GOAL_RATIO else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
