"""What lesson 06 reads and shows of a rank's record under torchrun: each rank's folder read back in
rank order (``read_run``), and how a rank writes its files. The record itself, its one reader and
its writers are :mod:`ddp_lib.launch._record`; this module only gives the lesson those names.
"""

from __future__ import annotations

from ddp_lib.launch._record import (
    _write_whole,
    json_line,
    read_ranks,
    read_run,
    stdout_in_folder,
    write_error,
    write_rank,
    write_result,
)

__all__ = ["_write_whole", "json_line", "read_ranks", "read_run", "stdout_in_folder", "write_error", "write_rank",
           "write_result"]
