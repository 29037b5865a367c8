"""Teaching PyTorch DistributedDataParallel: launcher, process groups, workers, plots, benchmarks.

    from ddp_lib import run_ranks                      # = ddp_lib.launch.run_ranks
    from ddp_lib.launch import launch                  # results with each rank's output
    from ddp_lib.process_group import process_group    # join a group: with process_group(...) as device

``ddp_lib.launch`` and ``ddp_lib.process_group`` are modules, whatever was imported before.
Nothing heavy (torch) is imported until ``run_ranks`` is used. The launcher's internals are
private modules of the folder ``ddp_lib/launch/``.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["run_ranks"]


def __getattr__(name: str):
    if name == "run_ranks":
        from ddp_lib.launch import run_ranks

        return run_ranks
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
