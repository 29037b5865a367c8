"""The exceptions the launcher raises in the calling process."""

from __future__ import annotations

import re


class LaunchInputError(ValueError):
    """Bad input to a launch, found before any process starts. The message is one line."""


class WorkerError(RuntimeError):
    """A rank failed: it raised, or exited without returning a result.

    ``rank``, ``exc_type`` and ``message`` say what happened; ``worker_traceback`` is the
    traceback text from the child (empty if it died without raising); ``failures`` maps
    every failed rank to its one-line description; ``outputs`` holds each rank's captured
    output.
    """

    def __init__(self, rank: int, exc_type: str, message: str, worker_traceback: str = "",
                 failures: dict[int, str] | None = None, outputs: dict | None = None):
        self.rank = rank
        self.exc_type = exc_type
        self.message = message
        self.worker_traceback = worker_traceback
        self.failures = failures or {}
        self.outputs = outputs or {}
        if exc_type:
            summary = f"rank {rank} raised {exc_type}: {message}"
        else:
            summary = f"rank {rank} {message}"
        super().__init__(summary)


class LaunchTimeout(TimeoutError):
    """The job passed its deadline; every rank was stopped. ``running`` lists the ranks
    that had not finished."""

    def __init__(self, timeout: float, running: list[int], outputs: dict | None = None):
        self.timeout = timeout
        self.running = running
        self.outputs = outputs or {}
        ranks = ", ".join(str(r) for r in running)
        super().__init__(
            f"the job did not finish within its {timeout:g} s deadline; "
            f"rank{'s' if len(running) != 1 else ''} {ranks} still running were stopped"
        )


_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp):\d+\]\s*")
_PEER_PORT = re.compile(r"(\[[0-9a-fA-F.:]+\]):\d+")
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")


def readable(message: str, limit: int | None = None) -> str:
    """``message`` without what changes from run to run or machine to machine (C++ source
    locations such as ``[/path/pair.cc:553]``, peer ports such as ``[127.0.0.1]:43236``,
    terminal colour codes),
    cut at a word boundary to at most ``limit`` characters."""
    text = _PEER_PORT.sub(r"\1:PORT", _SOURCE_LOCATION.sub("", _TERMINAL_CODES.sub("", message))).strip()
    if limit is not None and len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text
