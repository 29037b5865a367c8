"""Start one process per rank, collect what each returns, and clean up whatever happens.

    results = run_ranks(demo_basic, world_size=4)      # [rank 0's return value, rank 1's, ...]
    job = launch(demo_basic, world_size=4)             # job.results, job.stdout, job.stderr

``fn(rank, world_size, *args, **kwargs)`` runs in each child, as in the classic ``mp.spawn``
example (see :func:`ddp_lib.launch._run.launch` for every option). ``ddp_lib.mp.labelled_spawn`` is the
drop-in for ``torch.multiprocessing.spawn`` that leaves the store to the worker.

The launcher's parts are private modules of this folder:

- ``_run``: a launch from start to result (the rendezvous store, each rank's environment, the error raised);
- ``_checks``, ``_worker_params``: the input refused, in one line, before anything starts;
- ``_job``, ``_forkserver``, ``_processes``: the rank processes, started, watched and stopped;
- ``_child``: what runs first in each rank the launcher starts;
- ``_output``: each rank's folder and its stdout and stderr files, shown live and afterwards;
- ``_record``: a rank's record in its folder (place, result, error, output), the same whether the
  launcher or torchrun started the rank, written by the rank, read by one reader; ``dump_result``,
  the one serialisation of a result;
- ``_stacks``: where a rank's threads are, written by the rank as data when asked (a deadline);
- ``_rank_side``: a rank under torchrun (``python -m ddp_lib.torchrun module:function``);
- ``_torchrun_command``, ``_torchrun_jobs``, ``_torchrun_display``: torchrun run from Python
  (``ddp_lib.torchrun``): its command line, its supervision, its summary shown.

Importing this package imports no torch: ``run_ranks`` and ``launch`` import it when first used,
and a rank under torchrun that never needs torch starts in a fraction of a second.
"""

from __future__ import annotations

__all__ = ["LAUNCH_TIMEOUT_S", "LaunchResult", "launch", "run_ranks"]


def __getattr__(name: str):
    # Whatever ``_run`` defines (run_ranks, launch, LaunchResult, ...), loaded with torch on first use.
    if name.startswith("_"):  # a private module of this folder is imported, not looked up
        raise AttributeError(name)
    from ddp_lib.launch import _run

    try:
        return getattr(_run, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
