"""Start one process per rank, collect what each returns, and clean up whatever happens.

    results = run_ranks(demo_basic, world_size=4)      # [rank 0's return value, rank 1's, ...]

``fn(rank, world_size, *args, **kwargs)`` runs in each child, as in the classic ``mp.spawn``
example. Each child gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and
LOCAL_WORLD_SIZE, so a worker may call ``dist.init_process_group`` itself or use
``ddp_lib.process_group``. Like torchrun, the launcher itself hosts the rendezvous store (on
loopback, on a port the OS picks and the launcher holds), so workers must not overwrite
MASTER_ADDR or MASTER_PORT (a rank that does fails at once, saying so). ``ddp_lib.mp.labelled_spawn``
is the drop-in for ``torch.multiprocessing.spawn`` that leaves the store to the worker.

Each rank's stdout and stderr go to files in its own folder, beside its record (its result or its
error, written as a rank under torchrun writes them: :mod:`ddp_lib.launch._record`). Rank 0's are
printed as they come (a progress bar redrawn with carriage returns as one line updated in place),
the other ranks' afterwards, from this process, in rank order, labelled ``[rank N]``: the same in
JupyterLab, under nbval and in a terminal.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
from dataclasses import dataclass, field

import torch.distributed as dist

from ddp_lib.errors import Failure, LaunchInterrupted, LaunchTimeout, WorkerError, with_silent_ranks
from ddp_lib.launch import _child
from ddp_lib.launch._checks import Launch, check_launch
from ddp_lib.launch._job import Job
from ddp_lib.launch._output import (
    RankOutput,
    live_view,
    output_dir,
    own_multiprocessing_folder,
    print_other_ranks,
    sweep_orphaned_logdirs,
)
from ddp_lib.launch._processes import stop_to_the_end
from ddp_lib.ports import taken_port_hint
from ddp_lib.process_group import BACKEND_ENV, threads_per_rank

LAUNCH_TIMEOUT_S = 300.0  # a hung job becomes an error, not a cell that never ends



@dataclass
class LaunchResult:
    """What a successful launch returns: results, stdout and stderr, each a list in rank order."""

    results: list
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def run_ranks(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, **options) -> list:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` processes; return their
    results in rank order. Options are those of :func:`launch`."""
    return launch(fn, world_size, args, kwargs, **options).results


def launch(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, *, backend: str | None = None,
           timeout: float | None = LAUNCH_TIMEOUT_S, start_method: str | None = None,
           show_output: bool | str = True, env: dict[str, str] | list[dict[str, str]] | None = None) -> LaunchResult:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on each rank and wait for all of them.

    fn: a function importable by name (module-level, or in the script being run), or a
        ``functools.partial`` of one that binds keywords only (positional ones are refused).
    backend: passed to workers as DDP_LIB_BACKEND (default: nccl if every rank has a GPU, else gloo).
    timeout: seconds before a job still running is stopped with LaunchTimeout (None: no deadline).
    start_method: "forkserver" (default where available), "spawn" or "fork".
    show_output: True prints each rank's stdout and stderr, "stdout" only stdout, False nothing.
    env: extra environment variables for every rank (a dict), or for each rank its own (a list of
        world_size dicts).
    Raises LaunchInputError before starting anything, WorkerError naming the rank that
    failed, or LaunchTimeout. No child, and no process a child started, is left running.
    """
    checked = check_launch(fn, world_size, args, kwargs, backend=backend, start_method=start_method,
                           timeout=timeout, env=env, show_output=show_output)
    return start(checked, show_output=show_output)


def start(checked: Launch, show_output: bool | str = True) -> LaunchResult:
    """Run a launch that :func:`ddp_lib.launch._checks.check_launch` has checked (as :func:`launch` does)."""
    with _loopback_store() as store:
        envs = rank_environments(checked.world_size, checked.backend, checked.env, store_port=store.port)
        return run_job(checked.fn_ref, checked.world_size, (checked.args, checked.kwargs), envs,
                       start_method=checked.start_method, timeout=checked.timeout, show_output=show_output,
                       pass_world_size=True, store=store)


def run_job(fn_ref: str, world_size: int, args_kwargs: tuple[tuple, dict], envs: list[dict[str, str]], *,
            start_method: str, timeout: float | None, show_output: bool | str, pass_world_size: bool,
            store: _loopback_store | None = None, exit_like_torch: bool = False) -> LaunchResult:
    """Start the ranks, wait, stop whatever is left, show the output, raise or return.

    With ``store`` (ddp_lib.launch) the ranks must keep its MASTER_ADDR/MASTER_PORT; without
    (ddp_lib.mp) the worker chooses them. ``exit_like_torch`` (ddp_lib.mp): a rank that calls
    sys.exit(0) or os._exit(0) has finished, with None as its result, as under torch.
    """
    sweep_orphaned_logdirs()  # first: whatever fails below, a killed launch's files go
    launcher_folder = own_multiprocessing_folder()
    args_blob = pickle.dumps(args_kwargs)
    store_env = {k: envs[0][k] for k in ("MASTER_ADDR", "MASTER_PORT")} if store else None
    with output_dir() as logdir:
        specs = [_child.RankSpec(rank=r, world_size=world_size, fn_ref=fn_ref, args_blob=args_blob,
                                 pass_world_size=pass_world_size, env=envs[r], output=RankOutput(logdir, r),
                                 sys_path=list(sys.path), cwd=os.getcwd(), store_env=store_env,
                                 exit_like_torch=exit_like_torch, launcher_folder=launcher_folder)
                 for r in range(world_size)]
        job = Job(specs, start_method, live_view(specs[0].output, show_output), store)
        interrupted = False
        try:
            job.start()
            job.wait(timeout)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            # A press while the ranks are being stopped waits until they are. With another error on
            # its way out, that error is reported and the press dropped.
            if stop_to_the_end(job.stop):
                interrupted = True
        if interrupted:
            raise LaunchInterrupted(world_size) from None
        outputs = job.read_outputs()
    print_other_ranks(outputs, show_output)
    if job.failures:
        silent = [r for r in range(world_size) if r not in job.failures and r not in job.results]
        failures, hint = with_silent_ranks(job.failures, silent)
        rank = job.first_failure()
        raise WorkerError.blaming(failures, outputs, _port_hint(failures[rank]) or hint, pid=job.pids[rank],
                                  exit_code=job.exit_codes.get(rank))
    if job.running:
        raise LaunchTimeout(timeout, job.running, outputs, job.stacks, job.stack_frames)
    return LaunchResult([job.results[r] for r in range(world_size)],
                        [outputs[r][0] for r in range(world_size)], [outputs[r][1] for r in range(world_size)])


def _port_hint(failure: Failure) -> str:
    """What to do when the rank could not listen on its MASTER_PORT (a DistNetworkError, whose
    record keeps the port) because another process holds it: found by binding the port here
    (errno EADDRINUSE), not from the error's words."""
    return taken_port_hint(failure.port)


class _loopback_store:
    """A TCPStore served by this process on 127.0.0.1 only, on a port the OS picks and we hold
    for the whole job: no fixed port, no race between choosing a port and using it."""

    def __enter__(self) -> _loopback_store:
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            self.port = listener.getsockname()[1]
            self.store = dist.TCPStore("127.0.0.1", self.port, is_master=True, wait_for_workers=False,
                                       master_listen_fd=listener.fileno())
        except BaseException:
            listener.close()
            raise
        listener.detach()  # the store owns the listening socket now and closes it
        return self

    def __exit__(self, *exc) -> None:
        del self.store


def _loopback_interface() -> str | None:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in names if n in ("lo", "lo0")), None)


def rank_environments(world_size: int, backend: str, extra: list[dict[str, str]] | None,
                      store_port: int | None) -> list[dict[str, str]]:
    """Each rank's environment, with ``extra[rank]`` added. With ``store_port``, the launcher's
    store (all ranks its clients, as under torchrun); without, the worker sets MASTER_ADDR/MASTER_PORT
    and rank 0 hosts the store, as under torch.multiprocessing."""
    base = dict(os.environ)
    # Run from inside a torchrun rank, the ranks must not write their errors to that rank's error file.
    base.pop("TORCHELASTIC_ERROR_FILE", None)
    base.update({"WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size), BACKEND_ENV: backend})
    if store_port is not None:
        base.update({
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store_port), "GROUP_RANK": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
        })
    else:
        for name in ("TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "GROUP_RANK"):
            base.pop(name, None)
    base.setdefault("OMP_NUM_THREADS", str(threads_per_rank(world_size)))
    # gloo connects every pair of ranks inside init_process_group, and a rank that leaves its group
    # (exits, or destroys it) while a peer is still connecting breaks that peer's connect ("Gloo
    # connectFullMesh failed ... Connection closed by peer"): a worker that makes no collective, or
    # whose neighbours finish first, then fails now and then on a busy machine. Torch's own barrier
    # at the end of init_process_group (TORCH_DIST_INIT_BARRIER, off by default) lets no rank leave
    # before every rank has finished its connections.
    base.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    # A rank writes to files, not a terminal: no colour codes in its tracebacks, although a
    # Jupyter kernel sets FORCE_COLOR (Python 3.13 reads PYTHON_COLORS first; other tools NO_COLOR).
    base.update({"PYTHON_COLORS": "0", "NO_COLOR": "1"})
    loopback = _loopback_interface()
    if loopback:
        # gloo would otherwise listen on the address the host name resolves to.
        base.setdefault("GLOO_SOCKET_IFNAME", loopback)
    extra = extra or [{}] * world_size
    return [{**base, **extra[r], "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(world_size)]
