"""Checker for lesson 07's exercise: evaluation that every rank takes part in.

The worker ``fn(rank, world_size)`` joins the process group, takes its own metric
``rank + 1`` and returns the mean over all ranks, the same on every rank, without hanging.
"""

from __future__ import annotations

import re

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError, readable
from ddp_lib.exercises.lesson00 import CheckReport
from ddp_lib.launch import spawn

BROKEN_COLLECTIVE = re.compile(r"Connection closed|Connection reset|Read error|Timed out|monitoredBarrier")
HINT = "; does every rank call the same collectives, in the same order?"


def check_evaluation(fn, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30) -> CheckReport:
    """Run ``fn`` on each world size with a deadline and check every rank's returned mean."""
    report = CheckReport()
    for world_size in world_sizes:
        want = (world_size + 1) / 2
        try:
            results = spawn(fn, world_size, timeout=timeout, show_output=False)
        except LaunchTimeout as exc:
            report.fail(f"{world_size} ranks: still running after {timeout:g} s on rank(s) "
                        f"{', '.join(map(str, exc.running))}{HINT}")
            continue
        except WorkerError as exc:
            if BROKEN_COLLECTIVE.search(exc.message):
                # The exact words depend on timing (closed, reset, timed out): say what happened.
                report.fail(f"{world_size} ranks: rank {exc.rank}'s collective broke because another rank "
                            f"left it or never joined ({exc.exc_type}){HINT}")
            else:
                report.fail(f"{world_size} ranks: {readable(str(exc), 120)}")
            continue
        except LaunchInputError as exc:
            report.fail(f"{world_size} ranks: {exc}")
            continue
        wrong = [(r, v) for r, v in enumerate(results) if not isinstance(v, (int, float)) or abs(v - want) > 1e-6]
        if wrong:
            rank, got = wrong[0]
            report.fail(f"{world_size} ranks: rank {rank} returned {got!r}, expected the mean {want:g} on every rank")
        else:
            report.ok(f"{world_size} ranks: every rank returned the mean {want:g}")
    return report
