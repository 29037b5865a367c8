"""The long reliability checks, whose figures go in the Reliability table (docs/reliability.md).

    python tools/reliability.py            # every check
    python tools/reliability.py teardown   # the tutorial's worker (its own setup and cleanup) 100 times
    python tools/reliability.py mp         # the same worker 100 times through ddp_lib.mp, its own port
    python tools/reliability.py twice      # every cell of every notebook run twice in one kernel
    python tools/reliability.py repeat     # the notebook test suite run three times
    python tools/reliability.py busy       # launches for 2 minutes on a machine kept busy, ids wrapping around

The quick checks (no process left behind after each kind of failure, 50 launches in a row,
10 at once, bad input refused, a kernel interrupted or restarted mid-launch) are pytest tests:
tests/test_launch.py, tests/test_launch_checks.py and tests/test_reliability.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
NBVAL = ["--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "-v"]


def teardown(times: int = 100) -> bool:
    """The official tutorial's worker, which destroys its own process group, launched ``times``
    times in a row with the default start method: every launch must finish (none hangs)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import tutorial_workers

    from ddp_lib.launch import run_ranks

    failures = []
    for i in range(times):
        try:
            run_ranks(tutorial_workers.demo_basic, 2, timeout=60, show_output=False)
        except Exception as exc:  # counted and reported below
            failures.append(f"launch {i}: {exc!r}")
    print(f"tutorial worker {times} times in a row: {times - len(failures)} finished, {len(failures)} failed",
          *failures, sep="\n", flush=True)
    return not failures


def mp(times: int = 100) -> bool:
    """The same worker through the drop-in ``ddp_lib.mp.labelled_spawn``, where it picks the port itself
    (a free one here, kept by its setup(), so that other jobs on the machine cannot collide)."""
    import os

    sys.path.insert(0, str(ROOT / "tests"))
    import tutorial_workers

    import ddp_lib.mp
    from ddp_lib.process_group import free_port

    failures = []
    for i in range(times):
        os.environ["MASTER_PORT"] = str(free_port())
        try:
            ddp_lib.mp.labelled_spawn(tutorial_workers.demo_basic, args=(2,), nprocs=2, timeout=60)
        except Exception as exc:  # counted and reported below
            failures.append(f"launch {i}: {exc!r}")
    print(f"tutorial worker through ddp_lib.mp {times} times in a row: {times - len(failures)} finished, "
          f"{len(failures)} failed", *failures, sep="\n", flush=True)
    return not failures


def raises(cell) -> bool:
    return "raises-exception" in cell.metadata.get("tags", []) or "NBVAL_RAISES_EXCEPTION" in cell.source


def run_twice(path: Path) -> list[str]:
    """Execute every code cell, then every code cell again, in one kernel; return the errors."""
    # Imported here, not at the top: every rank a launch starts imports this script again
    # (as __mp_main__), and these two cost seconds to import.
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    errors = []
    with client.setup_kernel():
        for round_ in (1, 2):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                try:
                    client.execute_cell(cell, index)
                except Exception as exc:  # a cell that must not raise did: record it
                    if not raises(cell):
                        errors.append(f"{path.name} round {round_} cell {index}: {type(exc).__name__}")
    return errors


def twice() -> bool:
    failed = []
    for path in NOTEBOOKS:
        errors = run_twice(path)
        print(f"{path.name}: {'ok' if not errors else errors}", flush=True)
        failed += errors
    print(f"every cell run twice in one kernel: {len(NOTEBOOKS)} notebooks, {len(failed)} errors")
    return not failed


def repeat(times: int = 3) -> bool:
    outcomes = []
    for i in range(times):
        out = subprocess.run([sys.executable, "-m", "pytest", "notebooks", *NBVAL], cwd=ROOT,
                             capture_output=True, text=True)
        summary = out.stdout.strip().splitlines()[-1]
        # The outcome of every cell, by name, so that "identical" means cell for cell.
        cells = sorted(" ".join(line.split()[:2]) for line in out.stdout.splitlines() if "::" in line)
        outcomes.append((out.returncode, summary.split(" in ")[0], cells))
        print(f"run {i + 1}: {summary}", flush=True)
    identical = all(o == outcomes[0] for o in outcomes) and outcomes[0][0] == 0
    print(f"notebook suite {times} times: {'identical, all passed' if identical else 'DIFFERENT or failing'}")
    return identical


def busy(seconds: float = 120.0) -> bool:
    """tests/test_stress_pids.py's stress run, for longer: launches from three threads with a busy
    loop per core, process ids wrapping around, and finished ranks' ids given to other processes;
    no launch may fail and no launcher may stop a process that is not its own."""
    import tempfile

    sys.path.insert(0, str(ROOT / "tests"))
    import stress_workers

    with tempfile.TemporaryDirectory() as tmp:
        tally = stress_workers.stress(seconds, tmp)
    print(f"busy machine, {seconds:g} s: {tally.launches} launches, {len(tally.failures)} failed; "
          f"{len(tally.takers_stopped)} of {tally.taken} processes given a finished rank's id were stopped; "
          f"{tally.ids_churned} process ids used up meanwhile")
    for line in tally.failures:
        print(f"  {line}")
    return tally.launches > 0 and not tally.failures and not tally.takers_stopped


if __name__ == "__main__":
    which = sys.argv[1:] or ["teardown", "mp", "twice", "repeat", "busy"]
    checks = {"teardown": teardown, "mp": mp, "twice": twice, "repeat": repeat, "busy": busy}
    ok = all([checks[name]() for name in which])
    sys.exit(0 if ok else 1)
