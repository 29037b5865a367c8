"""Real output where a cell can run, a recorded transcript of a real run where it cannot.

The cluster lab's cells need root on Linux (network namespaces, SLURM daemons). Where they can
run, :func:`live_or_recorded` runs them and shows their output as it comes; elsewhere it prints
the output of a real run of the same cell, stored in ``ddp_lib/cluster/recorded/NAME.txt`` and
labelled as recorded. Transcripts are written only when ``DDP_LIB_RECORD=1`` is set:

    DDP_LIB_RECORD=1 make notebooks NB=notebooks/06b_cluster_lab.ipynb     # as root, on Linux
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import torch

RECORDED = Path(__file__).resolve().parent / "recorded"


class _Tee:
    """A stdout that writes through to the real one (output shows as it comes) and keeps a copy."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def live_or_recorded(name: str, reason: str | None, run: Callable[[], object]) -> None:
    """Call ``run()`` (which prints) when ``reason`` is None; else print the transcript of a real
    run stored under ``name``, after a line saying it is recorded and why this kernel cannot run it."""
    if reason is None:
        tee = _Tee(sys.stdout)
        with redirect_stdout(tee):
            run()
        if os.environ.get("DDP_LIB_RECORD") == "1":
            header = (f"recorded: a real run of this cell on {platform.system()} as root, torch "
                      f"{torch.__version__.split('+')[0]}, Python {platform.python_version()}\n")
            (RECORDED / f"{name}.txt").write_text(header + "".join(tee.parts))
        return
    path = RECORDED / f"{name}.txt"
    if not path.is_file():  # never a sentence in place of output: a missing transcript is an error
        raise FileNotFoundError(f"this kernel cannot run this cell ({reason}), and no recorded run of it is "
                                f"stored: {path} is missing; record one with DDP_LIB_RECORD=1 as root on Linux")
    header, _, body = path.read_text().partition("\n")
    print(f"[{header}. This kernel cannot run it: {reason}.]")
    print(body, end="")
