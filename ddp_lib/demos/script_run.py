"""Say how a script run as a terminal would (``python -m module``) ended.

Lesson 00 runs the tutorial's fixed file with ``subprocess.run`` in its own cell, under torch's own
``mp.spawn``, and reads the result with ``ScriptRun.of``.
"""

from __future__ import annotations

import subprocess
from typing import NamedTuple

from ddp_lib.demos.spawning import SIGABRT_WORDINGS  # a rank ended by SIGABRT, in the launchers' words
from ddp_lib.errors import last_line


class ScriptRun(NamedTuple):
    """How ``python -m module`` ended: its exit code and what it printed to each stream."""

    exit_code: int
    stdout: str
    stderr: str

    @classmethod
    def of(cls, done: subprocess.CompletedProcess) -> ScriptRun:
        """Read a finished ``subprocess.run(..., capture_output=True, text=True)``."""
        return cls(done.returncode, done.stdout, done.stderr)

    def printed(self) -> list[str]:
        """The lines it printed to standard output, sorted: ranks print in any order."""
        return sorted(line.strip() for line in self.stdout.splitlines() if line.strip())

    def verdict(self) -> str:
        """One line: exit code 0, or the last error line, and whether it was the abort at exit."""
        if self.exit_code == 0:
            return "exit code: 0 (every rank finished)"
        said = f"exit code: {self.exit_code}; its last error line: {last_line(self.stderr, '(none)')}"
        if any(wording in self.stderr for wording in SIGABRT_WORDINGS):  # the abort at exit
            said += "\na known torch abort at exit (lesson 02): run it again"
        return said
