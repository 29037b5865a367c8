"""A drop-in for ``torch.multiprocessing.spawn``: change only the import.

    import ddp_lib.mp as mp            # was: import torch.multiprocessing as mp

    def main(rank, world_size):
        setup(rank, world_size)        # the tutorial's own: sets MASTER_ADDR/MASTER_PORT itself
        ...

    if __name__ == "__main__":
        results = mp.spawn(main, args=(world_size,), nprocs=world_size, join=True)

``fn(i, *args)`` runs on ``nprocs`` processes, as under torch; the worker picks the address
and port and rank 0 hosts the rendezvous store there, as under torch. What ddp_lib adds: each
rank's output labelled ``[rank N]`` and printed in rank order (rank 0's as it comes), an error
that names the rank with the worker's traceback as its cause (and, when the worker's fixed
port is taken, the port and the process holding it), nothing left running, the return values
as a list, and a deadline (``timeout``, 300 s by default) instead of an endless wait.

Differences from torch, on purpose:
- ``start_method="spawn"`` (torch's default) starts the ranks from ddp_lib's forkserver, which
  has imported torch already: a child is still a fresh process that imports the main script
  as ``__mp_main__``, as under spawn, but starts in milliseconds instead of seconds. "fork" and
  "forkserver" are honoured as given. For real spawn, use ``ddp_lib.launch.spawn(...,
  start_method="spawn")``.
- ``join=False`` is refused: ranks run only inside the call, so that nothing is left running.
- ``daemon`` is accepted and has no effect: the ranks are always stopped when the call ends.
"""

from __future__ import annotations

from collections.abc import Iterable

from ddp_lib.checks import (
    check_picklable,
    check_start_method,
    check_timeout,
    check_worker,
    check_world_size,
    unwrap_partial,
)
from ddp_lib.device import default_backend
from ddp_lib.errors import LaunchInputError
from ddp_lib.launch import DEFAULT_TIMEOUT_S, _rank_env, run_job

__all__ = ["spawn"]


def _iterable_args(args: object) -> tuple:
    """``args`` as a tuple. torch calls ``fn(i, *args)``, so any iterable works there (a list too);
    a non-iterable such as ``args=(4)``, which is just 4, fails in every child: refuse it here."""
    try:
        return tuple(args)
    except TypeError:
        raise LaunchInputError(
            f"args must be an iterable of extra arguments for the worker (each rank runs fn(i, *args)), got "
            f"{type(args).__name__} {args!r}; (x) is just x in Python, write args=({args!r},)") from None


def spawn(fn, args: Iterable = (), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn", *, timeout: float | None = DEFAULT_TIMEOUT_S) -> list:
    """Run ``fn(i, *args)`` for i in range(nprocs), each in its own process; return the
    results in rank order. Raises WorkerError naming the rank that failed, LaunchTimeout
    after ``timeout`` seconds (None: no deadline), LaunchInputError for bad input."""
    if join is not True:
        raise LaunchInputError(
            f"join must be True, got {join!r}: ddp_lib.mp.spawn returns when every rank has finished, so that "
            "nothing is left running (for processes that outlive the call, use torch.multiprocessing)")
    nprocs = check_world_size(nprocs)
    fn, args, kwargs = unwrap_partial(fn, _iterable_args(args), {})
    check_picklable(args, kwargs)
    fn_ref = check_worker(fn)
    if start_method == "spawn":
        start_method = None  # the forkserver where available: see the module's docstring
    start_method = check_start_method(start_method)
    timeout = check_timeout(timeout)
    envs = _rank_env(nprocs, default_backend(nprocs), None, store_port=None)
    return run_job(fn_ref, nprocs, (args, kwargs), envs, start_method=start_method, timeout=timeout,
                   show_output=True, pass_world_size=False).results
