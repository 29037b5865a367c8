"""Start one process per rank, collect what each returns, and clean up whatever happens.

    results = spawn(demo_basic, world_size=4)      # [rank 0's return value, rank 1's, ...]

``fn(rank, world_size, *args)`` runs in each child, as in the classic ``mp.spawn`` example.
Each child gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE,
so a worker may call ``dist.init_process_group`` itself or use ``ddp_lib.process_group``.
Like torchrun, the launcher itself hosts the rendezvous store (on loopback, on a port the OS
picks and the launcher holds), so workers must not overwrite MASTER_ADDR or MASTER_PORT.

Each rank's stdout and stderr go to files that are printed afterwards from this process, in
rank order, labelled ``[rank N]``: the same in JupyterLab, under nbval and in a terminal.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import torch.distributed as dist

from ddp_lib import _child
from ddp_lib.checks import check_launch
from ddp_lib.device import threads_per_rank
from ddp_lib.errors import LaunchTimeout, WorkerError
from ddp_lib.process_group import BACKEND_ENV

DEFAULT_TIMEOUT = 300.0  # seconds: a hung job becomes an error, not a cell that never ends
STOP_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when stopping ranks
EXIT_GRACE = 10.0  # seconds a rank that has returned gets to exit before it is stopped
FAILURE_GRACE = 2.0  # seconds to hear from other ranks after the first failure
# How gloo reports that a peer went away: the failure of a rank whose partner failed first.
_PEER_FAILED = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|Read error")

# Preloaded once into the forkserver, so each child starts with torch already imported.
# (DDP imports torch._dynamo on construction: 2-3 s per child if not preloaded.)
# ddp_lib itself is not preloaded: children import it fresh, so edits take effect.
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo"]


@dataclass
class LaunchResult:
    """What a successful launch returns: results, stdout and stderr, each a list in rank order."""

    results: list
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def spawn(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, **options) -> list:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` processes; return their
    results in rank order. Options are those of :func:`launch`."""
    return launch(fn, world_size, args, kwargs, **options).results


def launch(fn, world_size: int, args: tuple = (), kwargs: dict | None = None, *, backend: str | None = None,
           timeout: float | None = DEFAULT_TIMEOUT, start_method: str | None = None,
           show_output: bool | str = True, env: dict[str, str] | None = None) -> LaunchResult:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on each rank and wait for all of them.

    fn: a function importable by name (module-level), or a ``functools.partial`` of one.
    backend: passed to workers as DDP_LIB_BACKEND (default: nccl if every rank has a GPU, else gloo).
    timeout: seconds before a job still running is stopped with LaunchTimeout (None: no deadline).
    start_method: "forkserver" (default where available), "spawn" or "fork".
    show_output: True prints each rank's stdout and stderr afterwards, "stdout" only stdout, False nothing.
    env: extra environment variables for every rank.
    Raises LaunchInputError before starting anything, WorkerError naming the rank that
    failed, or LaunchTimeout. No child is left running in any case.
    """
    fn_ref, world_size, args, kwargs, backend, start_method, timeout = check_launch(
        fn, world_size, args, kwargs, backend, start_method, timeout)
    with tempfile.TemporaryDirectory(prefix="ddp_lib-") as logdir, _loopback_store() as port:
        job = _Job(world_size, start_method, logdir)
        try:
            job.start(fn_ref, pickle.dumps((args, kwargs)), _rank_env(world_size, port, backend, env))
            job.wait(timeout)
        finally:
            job.stop()
        outputs = job.read_outputs()
    if show_output:
        _show(outputs, with_stderr=show_output is True)
    if job.failures:
        rank = job.first_failure()
        exc_type, message, tb = job.failures[rank]
        failures = {r: f"{t}: {_child.first_line(m)}" if t else m for r, (t, m, _) in job.failures.items()}
        raise WorkerError(rank, exc_type, _child.first_line(message), tb, failures, outputs)
    if job.running:
        raise LaunchTimeout(timeout, job.running, outputs)
    return LaunchResult([job.results[r] for r in range(world_size)],
                        [outputs[r][0] for r in range(world_size)], [outputs[r][1] for r in range(world_size)])


class _loopback_store:
    """A TCPStore served by this process on 127.0.0.1 only, on a port the OS picks and we hold
    for the whole job: no fixed port, no race between choosing a port and using it."""

    def __enter__(self) -> int:
        listener = socket.socket()
        try:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            self._store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False,
                                        master_listen_fd=listener.fileno())
        except BaseException:
            listener.close()
            raise
        listener.detach()  # the store owns the listening socket now and closes it
        return port

    def __exit__(self, *exc) -> None:
        del self._store


def _loopback_interface() -> str | None:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in names if n in ("lo", "lo0")), None)


def _rank_env(world_size: int, port: int, backend: str, extra: dict[str, str] | None) -> list[dict[str, str]]:
    base = dict(os.environ)
    base.update({
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", BACKEND_ENV: backend,
        # All ranks are clients of the store this process hosts, as under torchrun.
        "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
    })
    base.setdefault("OMP_NUM_THREADS", str(threads_per_rank(world_size)))
    loopback = _loopback_interface()
    if loopback:
        # gloo would otherwise listen on the address the host name resolves to.
        base.setdefault("GLOO_SOCKET_IFNAME", loopback)
    base.update({k: str(v) for k, v in (extra or {}).items()})
    return [{**base, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(world_size)]


def _context(start_method: str):
    return multiprocessing.get_context(start_method)


# Set on import, not at the first launch: the forkserver is one per process and keeps the
# preload it started with, so a raw mp.start_processes(..., "forkserver") run first would
# otherwise leave every later launch importing torch afresh.
if "forkserver" in multiprocessing.get_all_start_methods():
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)


class _Job:
    """The processes of one launch and what has been heard from them."""

    def __init__(self, world_size: int, start_method: str, logdir: str):
        self.world_size = world_size
        self.ctx = _context(start_method)
        self.paths = [(os.path.join(logdir, f"rank{r}.out"), os.path.join(logdir, f"rank{r}.err"))
                      for r in range(world_size)]
        self.procs: list = []
        self.conns: dict = {}  # reading end of each rank's result pipe, until heard from
        self.results: dict[int, object] = {}
        self.failures: dict[int, tuple[str, str, str]] = {}
        self.running: list[int] = []
        self.lifeline = None  # write end; closing it (or dying) ends every rank still alive

    def start(self, fn_ref, args_blob: bytes, envs: list[dict[str, str]]) -> None:
        lifeline, self.lifeline = self.ctx.Pipe(duplex=False)
        inherited = self.lifeline.fileno() if self.ctx.get_start_method() == "fork" else None
        for rank in range(self.world_size):
            reader, writer = self.ctx.Pipe(duplex=False)
            proc = self.ctx.Process(
                target=_child.run_rank, name=f"ddp_lib-rank{rank}", daemon=False,
                args=(rank, fn_ref, args_blob, envs[rank], *self.paths[rank], list(sys.path), os.getcwd(), writer,
                      lifeline, inherited))
            self.procs.append(proc)
            self.conns[rank] = reader
            proc.start()
            writer.close()
        lifeline.close()

    def wait(self, timeout: float | None) -> None:
        """Wait until every rank has reported, one has failed, or the deadline passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wait_until(deadline, stop_at_failure=True)
        if self.failures:
            # Other ranks often fail at the same moment (all raise, or a peer's collective
            # breaks): hear them too, so the report does not depend on which pipe won.
            self._wait_until(time.monotonic() + FAILURE_GRACE, stop_at_failure=False)
        elif not self.running:
            self._join_finished()

    def _wait_until(self, deadline: float | None, stop_at_failure: bool) -> None:
        while self.conns and not (stop_at_failure and self.failures):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if stop_at_failure:
                    self.running = sorted(self.conns)
                return
            # A rank is watched through its result pipe and its process sentinel until heard from.
            watched = {}
            for rank, conn in self.conns.items():
                watched[conn] = watched[self.procs[rank].sentinel] = rank
            for ready in wait(list(watched), remaining):
                rank = watched[ready]
                if rank in self.conns:
                    self._receive(rank)

    def first_failure(self) -> int:
        """The rank to blame: the lowest one that failed on its own, rather than because a
        peer's failure broke a collective (a closed or reset connection, torch's Dist*Error)."""
        own = [rank for rank, (exc_type, message, _) in self.failures.items()
               if not (exc_type.startswith("Dist") or _PEER_FAILED.search(message))]
        return min(own or self.failures)

    def _receive(self, rank: int) -> None:
        conn = self.conns[rank]
        proc = self.procs[rank]
        try:
            if not conn.poll() and proc.is_alive():
                return
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            proc.join(1)
            self.failures[rank] = ("", _describe_exit(proc.exitcode), "")
        else:
            if message[0] == "ok":
                self.results[rank] = message[1]
            else:
                self.failures[rank] = message[1:]
        del self.conns[rank]
        conn.close()

    def _join_finished(self) -> None:
        end = time.monotonic() + EXIT_GRACE
        for proc in self.procs:
            proc.join(max(0.0, end - time.monotonic()))

    def stop(self) -> None:
        """Stop every rank still alive: SIGTERM, then SIGKILL after a grace period."""
        alive = [p for p in self.procs if p.is_alive()]
        for proc in alive:
            proc.terminate()
        end = time.monotonic() + STOP_GRACE
        for proc in alive:
            proc.join(max(0.0, end - time.monotonic()))
        for proc in alive:
            if proc.is_alive():
                proc.kill()
                proc.join()
        for proc in self.procs:
            proc.close()
        for conn in self.conns.values():
            conn.close()
        if self.lifeline is not None:
            self.lifeline.close()

    def read_outputs(self) -> dict[int, tuple[str, str]]:
        return {r: tuple(_read(path) for path in self.paths[r]) for r in range(self.world_size)}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        import signal

        return f"was killed by {signal.Signals(-exitcode).name} before returning a result"
    return f"exited with code {exitcode} before returning a result"


def _show(outputs: dict[int, tuple[str, str]], with_stderr: bool) -> None:
    for rank in sorted(outputs):
        out, err = outputs[rank]
        for text, stream in ((out, sys.stdout), (err if with_stderr else "", sys.stderr)):
            if text:
                stream.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
                stream.flush()
