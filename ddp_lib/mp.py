"""A drop-in for the call ``torch.multiprocessing.spawn(...)``, not for the environment it gives.

    import ddp_lib.mp

    def main(rank, world_size):
        setup(rank, world_size)        # the tutorial's own: sets MASTER_ADDR/MASTER_PORT itself
        ...

    if __name__ == "__main__":
        results = ddp_lib.mp.labelled_spawn(main, args=(world_size,), nprocs=world_size, join=True)

Write ``ddp_lib.mp.labelled_spawn`` in full. ``import ddp_lib.mp as mp`` would hide torch's ``mp``, and two
different functions would then share one name.

``fn(i, *args)`` runs on ``nprocs`` processes, as under torch; the worker picks the address
and port and rank 0 hosts the rendezvous store there, as under torch. What ddp_lib adds: each
rank's output labelled ``[rank N]`` and printed in rank order (rank 0's as it comes), an error
that names the rank with the worker's traceback as its cause (and, when the worker's fixed
port is taken, the port and the process holding it), nothing left running, the return values
as a list, and a deadline (``timeout``, 300 s by default) instead of an endless wait.

Errors are torch's classes, so code written to handle them runs unchanged: a rank that raised
gives :class:`RankRaisedError`, a ``torch.multiprocessing.ProcessRaisedException``; a rank that
exited with a non-zero code or was killed by a signal gives :class:`RankExitedError`, a
``ProcessExitedException`` ("process 1 terminated with exit code 3", "... with signal SIGKILL").
Both are also ``ddp_lib.errors.WorkerError``, with the rank and the worker's traceback as the
cause. As under torch, a rank that calls ``sys.exit(0)``, ``exit()`` or ``os._exit(0)`` has
finished (its result is None), and ``sys.exit(3)`` is exit code 3.

Differences from torch, on purpose:
- The default start method is ddp_lib's forkserver (``start_method=None``), not spawn, which torch's
  ``mp.spawn`` always uses: the forkserver has imported torch already, so a child, still a fresh process that
  imports the main script as ``__mp_main__`` as under spawn, starts in milliseconds instead of
  seconds. "spawn", "fork" and "forkserver" are honoured as given.
- ``join=False`` is refused: ranks run only inside the call, so that nothing is left running.
  Code that uses it goes on to read ``context.processes`` (multiprocessing.Process objects it may
  terminate, join or outlive) or to run its own loop around ``context.join(timeout)``; an object
  that offered those could not also promise that no rank outlives the caller.
- A KeyboardInterrupt raised in a rank is reported as its error (torch's wrapper swallows it and
  the rank counts as finished).
- ``daemon`` is accepted and has no effect: the ranks are always stopped when the call ends.
- Each rank's environment also holds RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE, and,
  unless already set, OMP_NUM_THREADS (the usable cores shared out among the ranks),
  TORCH_DIST_INIT_BARRIER=1 (no rank leaves init_process_group before every rank has finished it) and
  GLOO_SOCKET_IFNAME (the loopback interface). Torch's spawn sets none of them, so code that reads
  ``os.environ["RANK"]`` works here and fails there. Neither sets MASTER_ADDR or MASTER_PORT.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

from ddp_lib.errors import LaunchInputError, WorkerError
from ddp_lib.launch import LAUNCH_TIMEOUT_S, rank_environments, run_job
from ddp_lib.launch._checks import check_launch
from ddp_lib.launch._job import signal_name

__all__ = ["RankExitedError", "RankRaisedError", "labelled_spawn"]


class _TorchWorkerError(WorkerError):
    """A WorkerError that is also one of torch.multiprocessing's exceptions (see the subclasses)."""

    def __init__(self, rank: int, exc_type: str, message: str, worker_traceback: str = "",
                 failures: dict[int, str] | None = None, outputs: dict | None = None,
                 pid: int | None = None, exit_code: int | None = None):
        super().__init__(rank, exc_type, message, worker_traceback, failures, outputs, pid, exit_code)
        self.error_index = rank
        self.error_pid = pid
        self.args = (self._summary(),)

    def _summary(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.rank, self.exc_type, self.message, self.worker_traceback, self.failures,
                            self.outputs, self.pid, self.exit_code)


class RankRaisedError(_TorchWorkerError, ProcessRaisedException):
    """A rank raised an exception: torch's ProcessRaisedException (``error_index``,
    ``error_pid``, ``msg`` as torch writes it, with the traceback) and ddp_lib's WorkerError."""

    def _summary(self) -> str:
        # torch's msg, the one attribute its own code reads, holds the whole traceback; the
        # printed message is one line, the traceback being shown above it as the cause.
        self.msg = f"\n\n-- Process {self.rank:d} terminated with the following error:\n{self.worker_traceback}"
        what = f"{self.exc_type}: {self.message}" if self.exc_type else self.message
        return f"Process {self.rank:d} terminated with the following error (rank {self.rank}): {what}"


class RankExitedError(_TorchWorkerError, ProcessExitedException):
    """A rank exited with a non-zero code, or was killed by a signal, without raising:
    torch's ProcessExitedException (``error_index``, ``error_pid``, ``exit_code``,
    ``signal_name``) and ddp_lib's WorkerError."""

    def _summary(self) -> str:
        if self.exit_code is None:  # not heard from and not seen to end: report as torch would a crash
            self.exit_code = 1
        self.signal_name = None
        if self.exit_code < 0:
            self.signal_name = signal_name(-self.exit_code)
            self.msg = f"process {self.rank:d} terminated with signal {self.signal_name}"
        else:
            self.msg = f"process {self.rank:d} terminated with exit code {self.exit_code:d}"
        if "while starting" in self.message:  # ddp_lib's hint on why, worth the second clause
            return f"{self.msg}: rank {self.rank} {self.message}"
        return self.msg


def _as_torch_error(error: WorkerError) -> WorkerError:
    cls = RankRaisedError if (error.exc_type or error.worker_traceback) else RankExitedError
    torch_error = cls(error.rank, error.exc_type, error.message, error.worker_traceback, error.failures,
                      error.outputs, error.pid, error.exit_code)
    torch_error.full_message = error.full_message
    torch_error.tracebacks = error.tracebacks
    return torch_error


def _iterable_args(args: object) -> tuple:
    """``args`` as a tuple. torch calls ``fn(i, *args)``, so any iterable works there (a list too);
    a non-iterable such as ``args=(4)``, which is just 4, fails in every child: refuse it here."""
    try:
        return tuple(args)
    except TypeError:
        raise LaunchInputError(
            f"args must be an iterable of extra arguments for the worker (each rank runs fn(i, *args)), got "
            f"{type(args).__name__} {args!r}; (x) is just x in Python, write args=({args!r},)") from None


def labelled_spawn(fn, args: Iterable = (), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str | None = None, *, timeout: float | None = LAUNCH_TIMEOUT_S) -> list:
    """Run ``fn(i, *args)`` for i in range(nprocs), each in its own process; return the
    results in rank order. Raises RankRaisedError or RankExitedError (torch's
    ProcessRaisedException and ProcessExitedException, and WorkerError), LaunchTimeout
    after ``timeout`` seconds (None: no deadline), LaunchInputError for bad input.

    ``start_method=None``, the default, starts the ranks from ddp_lib's forkserver, where torch's
    ``mp.spawn`` always uses "spawn" (see the module's docstring); a start method given by name is used as given."""
    if join is not True:
        raise LaunchInputError(
            f"join must be True, got {join!r}: ddp_lib.mp.labelled_spawn returns when every rank has finished, so that "
            "nothing is left running; the ProcessContext that join=False returns hands out the rank processes "
            "themselves (for processes that outlive the call, use torch.multiprocessing)")
    checked = check_launch(fn, nprocs, _iterable_args(args), start_method=start_method, timeout=timeout,
                           passes_world_size=False)
    envs = rank_environments(checked.world_size, checked.backend, None, store_port=None)
    try:
        return run_job(checked.fn_ref, checked.world_size, (checked.args, checked.kwargs), envs,
                       start_method=checked.start_method, timeout=checked.timeout, show_output=True,
                       pass_world_size=False, exit_like_torch=True).results
    except WorkerError as error:
        torch_error = _as_torch_error(error)
        raise torch_error from torch_error.__cause__
