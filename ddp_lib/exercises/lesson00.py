"""Checker for lesson 00's exercise: a first worker that reports who it is.

The worker ``fn(rank, world_size)`` must return ``{"rank": rank, "world_size": world_size,
"is_main": rank == 0}``. The checker runs it on 1, 2 and 3 ranks and says what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.launch import spawn


@dataclass
class CheckReport:
    """The verdict: ``passed``, and one line per thing checked (printing it shows them)."""

    passed: bool = True
    lines: list[str] = field(default_factory=list)

    def ok(self, line: str) -> None:
        self.lines.append(f"PASS {line}")

    def fail(self, line: str) -> None:
        self.passed = False
        self.lines.append(f"FAIL {line}")

    def __str__(self) -> str:
        verdict = "all checks passed" if self.passed else "some checks failed"
        return "\n".join([*self.lines, verdict])


def expected(rank: int, world_size: int) -> dict:
    return {"rank": rank, "world_size": world_size, "is_main": rank == 0}


def check_who_am_i(fn, world_sizes: tuple[int, ...] = (1, 2, 3)) -> CheckReport:
    """Run ``fn`` on each world size in turn and compare every rank's result with what it should be."""
    report = CheckReport()
    for world_size in world_sizes:
        try:
            results = spawn(fn, world_size, timeout=60, show_output=False)
        except (LaunchInputError, WorkerError) as exc:
            report.fail(f"{world_size} rank(s): {exc}")
            continue
        wrong = [(rank, got) for rank, got in enumerate(results) if got != expected(rank, world_size)]
        if wrong:
            rank, got = wrong[0]
            report.fail(f"{world_size} rank(s): rank {rank} returned {got!r}, expected {expected(rank, world_size)!r}")
        else:
            report.ok(f"{world_size} rank(s): every rank returned its rank, the world size and is_main")
    return report
