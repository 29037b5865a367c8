"""Teaching PyTorch DistributedDataParallel: launcher, process groups, workers, plots, benchmarks.

    from ddp_lib import run_ranks                      # = ddp_lib.launch.run_ranks
    from ddp_lib.launch import launch                  # results with each rank's output
    from ddp_lib.process_group import process_group    # join a group: with process_group(...) as device

``ddp_lib.launch`` and ``ddp_lib.process_group`` are modules, whatever was imported before.
Nothing heavy (torch) is imported until ``run_ranks`` is used. The launcher's internals are
private modules of the folder ``ddp_lib/launch/``.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"
__all__ = ["run_ranks"]

# Old names of two modules that moved into ddp_lib/launch/, still imported by the test suite's
# shared fixtures (tests/conftest.py); to be removed once those import ddp_lib.launch._processes
# and ddp_lib.launch._job.
from ddp_lib.launch import _processes  # noqa: E402

sys.modules.setdefault(f"{__name__}._processes", _processes)
del _processes


def __getattr__(name: str):
    if name == "run_ranks":
        from ddp_lib.launch import run_ranks

        return run_ranks
    if name == "_job":  # the old name, see above
        from ddp_lib.launch import _job

        return _job
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
