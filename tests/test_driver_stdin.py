"""A driver read from standard input (``python - <<EOF``): multiprocessing would make every
rank run "<stdin>" again as the main script; the launcher starts them as from a notebook."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import pythonpath_with_tests

DRIVER = """
import launcher_workers
import ddp_lib.mp as mp
from ddp_lib.launch import run_ranks

print(mp.labelled_spawn(launcher_workers.mp_rank, args=(10,), nprocs=2))
print(run_ranks(launcher_workers.talk, 2, kwargs=dict(lines=0), start_method="spawn", show_output=False))
"""


def test_a_driver_on_standard_input_starts_its_ranks():
    out = subprocess.run([sys.executable, "-"], input=DRIVER, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONPATH": pythonpath_with_tests()})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["[0, 10]", "[0, 10]"]
    assert "Traceback" not in out.stderr
