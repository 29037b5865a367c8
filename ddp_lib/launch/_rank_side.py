"""A rank under torchrun: the one entry point that runs a worker in a rank torchrun started, both
for ``python -m ddp_lib.torchrun module:function`` and for ``python -m ddp_lib run NAME`` under
torchrun. It writes the rank's record to its folder (:mod:`ddp_lib.launch._record`): its place
first, then its result or its error.

Imports no torch: ranks that run a function reading only the environment start and fail in a
fraction of a second.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading

from ddp_lib.errors import LaunchTimeout
from ddp_lib.launch import _record as rank_files
from ddp_lib.launch._child import write_stacks_on_signal
from ddp_lib.launch._stacks import answer_requests


def watch_this_rank(timeout: float | None = None) -> None:
    """In a rank under torchrun: write every thread's stack to stderr on STACK_DUMP_SIGNAL (as
    :func:`run_torchrun` asks at its deadline). With ``timeout``, this rank's own deadline: then it
    writes where it was to its stderr and a LaunchTimeout as its error (``TORCHELASTIC_ERROR_FILE``),
    and ends with exit code 1; torchrun stops the other ranks with SIGTERM, on which each writes
    where it was too. torchrun itself has no deadline for a job (its ranks may wait for ever)."""
    write_stacks_on_signal()
    if timeout is None:
        return
    if hasattr(signal, "SIGTERM"):
        faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    rank = int(os.environ["RANK"])

    def expire() -> None:
        print(f"[rank{rank}]: did not finish within its {timeout:g} s deadline (--timeout); it was here:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            raise LaunchTimeout(timeout, [rank])
        except LaunchTimeout as exc:
            rank_files.write_error(exc)
        os._exit(1)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    # If the worker holds the interpreter (C code that never lets go of the GIL), the timer cannot
    # run; faulthandler's own thread still writes the stacks and ends the process.
    faulthandler.dump_traceback_later(timeout + 10, exit=True, file=sys.stderr)


def run_this_rank(fn, kwargs: dict | None = None, *, timeout: float | None = None, report=None) -> int:
    """Under torchrun: write this rank's place to its ``rank.json``, watch for a request for its
    stack (and its own deadline, ``timeout``: :func:`watch_this_rank`), call
    ``fn(RANK, WORLD_SIZE, **kwargs)``, write what it returns to its ``result.json``
    (:func:`ddp_lib.launch._record.dump_result`), then ``report(rank, result, written)`` (by default,
    the result printed as one JSON line unless the rank's stdout goes to its folder, ``--redirects``).
    What it raises, or a result that cannot be pickled, goes as under ``@record`` to the error file
    torchrun names in ``TORCHELASTIC_ERROR_FILE``, with one line naming the rank on stderr; the
    exception is raised again (exit code 1). ``sys.exit(0)`` ends the rank as finished, as under
    ``@record``. Returns 0."""
    rank_files.write_rank()  # first: a rank that dies without a word is still read back as itself
    folder = rank_files.this_rank_dir()
    if folder is not None:  # where it was, written as data when its supervisor asks (a deadline)
        answer_requests(*rank_files.stack_files(folder))
    watch_this_rank(timeout)
    with contextlib.suppress(ValueError, OSError):  # as torch's @record does: a crash in C++ prints the stacks
        faulthandler.enable(all_threads=True)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        try:
            result = fn(rank, world_size, **(kwargs or {}))
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
            result = None
        written = rank_files.write_result(rank, result)
    except Exception as exc:
        rank_files.write_error(exc)
        # One line that names the rank, as the [rankN]: prefix of init_process_group's excepthook does
        # (this process may never import torch).
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise
    (report or _print_result)(rank, result, written)
    return 0


def _print_result(rank: int, result: object, written: bool) -> None:
    # Printed unless this rank's stdout goes to its folder too (--redirects), where result.json says it.
    if not written or not rank_files.stdout_in_folder():
        print(rank_files.json_line({"rank": rank, "result": result}), flush=True)


def main(target: str) -> int:
    """``python -m ddp_lib.torchrun module:function`` (as torchrun's program): run this rank of it."""
    import pkgutil

    return run_this_rank(pkgutil.resolve_name(target))
