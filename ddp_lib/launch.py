"""Start one process per rank, collect what each returns, and clean up whatever happens.

    results = spawn(demo_basic, world_size=4)      # [rank 0's return value, rank 1's, ...]

``fn(rank, world_size, *args, **kwargs)`` runs in each child, as in the classic ``mp.spawn``
example. Each child gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and
LOCAL_WORLD_SIZE, so a worker may call ``dist.init_process_group`` itself or use
``ddp_lib.process_group``. Like torchrun, the launcher itself hosts the rendezvous store (on
loopback, on a port the OS picks and the launcher holds), so workers must not overwrite
MASTER_ADDR or MASTER_PORT (a rank that does fails at once, saying so). ``ddp_lib.mp.spawn``
is the drop-in for ``torch.multiprocessing.spawn`` that leaves the store to the worker.

Each rank's stdout and stderr go to files. Rank 0's stdout is printed as it comes, the rest
afterwards, from this process, in rank order, labelled ``[rank N]``: the same in JupyterLab,
under nbval and in a terminal.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import torch.distributed as dist

from ddp_lib import _child, make_callable
from ddp_lib.checks import check_launch
from ddp_lib.device import threads_per_rank
from ddp_lib.errors import LaunchTimeout, WorkerError, is_peer_failure
from ddp_lib.ports import port_holder
from ddp_lib.process_group import BACKEND_ENV

DEFAULT_TIMEOUT_S = 300.0  # a hung job becomes an error, not a cell that never ends
DEFAULT_TIMEOUT = DEFAULT_TIMEOUT_S  # the name the command line imports
STOP_GRACE_S = 3.0  # between SIGTERM and SIGKILL when stopping ranks
EXIT_GRACE_S = 10.0  # a rank that has returned gets this long to exit before it is stopped
FAILURE_GRACE_S = 2.0  # to hear from other ranks after the first failure
QUIET_NOTICE_S = 5.0  # with no rank at the rendezvous store after this long, say so (once)
STACK_DUMP_WAIT_S = 0.5  # for ranks still running at the deadline to write their stacks
OUTPUT_POLL_S = 0.1  # how often rank 0's new output is printed while the job runs

# Preloaded once into the forkserver, so each child starts with torch already imported.
# (DDP imports torch._dynamo on construction: 2-3 s per child if not preloaded.)
# ddp_lib itself is not preloaded: children import it fresh, so edits take effect.
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo"]
# A temporary output directory: "ddp_lib-<pid of the launching process>-<random>".
_LOGDIR_PREFIX = "ddp_lib-"
_LOGDIR = re.compile(re.escape(_LOGDIR_PREFIX) + r"(\d+)-")
_PORT_IN_USE = re.compile(r"(?:EADDRINUSE|address already in use|failed to listen).*?port: (\d+)|"
                          r"port: (\d+).*?(?:EADDRINUSE|address already in use)", re.I | re.S)


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
           timeout: float | None = DEFAULT_TIMEOUT_S, start_method: str | None = None,
           show_output: bool | str = True, env: dict[str, str] | None = None) -> LaunchResult:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on each rank and wait for all of them.

    fn: a function importable by name (module-level, or in the script being run), or a
        ``functools.partial`` of one.
    backend: passed to workers as DDP_LIB_BACKEND (default: nccl if every rank has a GPU, else gloo).
    timeout: seconds before a job still running is stopped with LaunchTimeout (None: no deadline).
    start_method: "forkserver" (default where available), "spawn" or "fork".
    show_output: True prints each rank's stdout and stderr, "stdout" only stdout, False nothing.
    env: extra environment variables for every rank.
    Raises LaunchInputError before starting anything, WorkerError naming the rank that
    failed, or LaunchTimeout. No child, and no process a child started, is left running.
    """
    fn_ref, world_size, args, kwargs, backend, start_method, timeout = check_launch(
        fn, world_size, args, kwargs, backend, start_method, timeout, env=env)
    with _loopback_store() as store:
        envs = _rank_env(world_size, backend, env, store_port=store.port)
        return run_job(fn_ref, world_size, (args, kwargs), envs, start_method=start_method, timeout=timeout,
                       show_output=show_output, pass_world_size=True, store=store)


def run_job(fn_ref: str, world_size: int, args_kwargs: tuple[tuple, dict], envs: list[dict[str, str]], *,
            start_method: str, timeout: float | None, show_output: bool | str, pass_world_size: bool,
            store: _loopback_store | None = None) -> LaunchResult:
    """Start the ranks, wait, stop whatever is left, show the output, raise or return.

    With ``store`` (ddp_lib.launch) the ranks must keep its MASTER_ADDR/MASTER_PORT; without
    (ddp_lib.mp) the worker chooses them.
    """
    _sweep_orphaned_logdirs()
    args_blob = pickle.dumps(args_kwargs)
    store_env = {k: envs[0][k] for k in ("MASTER_ADDR", "MASTER_PORT")} if store else None
    with tempfile.TemporaryDirectory(prefix=f"{_LOGDIR_PREFIX}{os.getpid()}-") as logdir:
        specs = [_child.RankSpec(r, world_size, fn_ref, args_blob, pass_world_size, envs[r],
                                 os.path.join(logdir, f"rank{r}.out"), os.path.join(logdir, f"rank{r}.err"),
                                 list(sys.path), os.getcwd(), logdir, store_env) for r in range(world_size)]
        job = _Job(specs, start_method, _LiveOutput(specs[0].stdout_path) if show_output else None, store)
        try:
            job.start()
            job.wait(timeout)
        finally:
            job.stop()
        outputs = job.read_outputs()
    if show_output:
        _show(outputs, with_stderr=show_output is True, already_shown=job.live.shown if job.live else "")
    if job.failures:
        rank = job.first_failure()
        exc_type, message, tb = job.failures[rank]
        message = _child.first_line(message) + _hint(exc_type, message, tb)
        failures = {r: f"{t}: {_child.first_line(m)}" if t else _child.first_line(m)
                    for r, (t, m, _) in job.failures.items()}
        raise WorkerError(rank, exc_type, message, tb, failures, outputs)
    if job.running:
        raise LaunchTimeout(timeout, job.running, outputs, job.stacks)
    return LaunchResult([job.results[r] for r in range(world_size)],
                        [outputs[r][0] for r in range(world_size)], [outputs[r][1] for r in range(world_size)])


def _hint(exc_type: str, message: str, tb: str) -> str:
    """What to do about a few failures whose own message does not say."""
    found = _PORT_IN_USE.search(message) or _PORT_IN_USE.search(tb)
    if found:
        port = int(found.group(1) or found.group(2))
        holder = port_holder(port)
        return (f" (port {port} is already taken{f' by {holder}' if holder else ''}: stop it, or set "
                "MASTER_PORT to a free port)")
    return ""


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
        self.empty_keys = self.store.num_keys()
        return self

    def anyone_joined(self) -> bool:
        """Whether any rank has written to the store yet (every rank does when it joins a group)."""
        return self.store.num_keys() > self.empty_keys

    def __exit__(self, *exc) -> None:
        del self.store


def _loopback_interface() -> str | None:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in names if n in ("lo", "lo0")), None)


def _rank_env(world_size: int, backend: str, extra: dict[str, str] | None,
              store_port: int | None) -> list[dict[str, str]]:
    """Each rank's environment. With ``store_port``, the launcher's store (all ranks its
    clients, as under torchrun); without, the worker sets MASTER_ADDR/MASTER_PORT and rank 0
    hosts the store, as under torch.multiprocessing."""
    base = dict(os.environ)
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
    loopback = _loopback_interface()
    if loopback:
        # gloo would otherwise listen on the address the host name resolves to.
        base.setdefault("GLOO_SOCKET_IFNAME", loopback)
    base.update({k: str(v) for k, v in (extra or {}).items()})
    return [{**base, "RANK": str(r), "LOCAL_RANK": str(r)} for r in range(world_size)]


def _sweep_orphaned_logdirs() -> None:
    """Remove output directories left by launching processes that were killed (SIGKILL leaves
    no chance to clean up; the ranks' watchdogs remove their own, this catches the rest)."""
    import shutil

    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        found = _LOGDIR.match(name)
        if found and not _pid_alive(int(found.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _context(start_method: str):
    return multiprocessing.get_context(start_method)


# Set on import, not at the first launch: the forkserver is one per process and keeps the
# preload it started with, so a raw mp.start_processes(..., "forkserver") run first would
# otherwise leave every later launch importing torch afresh.
if "forkserver" in multiprocessing.get_all_start_methods():
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)


class _LiveOutput:
    """Prints rank 0's stdout while the job runs, whole lines only, labelled ``[rank 0]``."""

    def __init__(self, path: str):
        self.path = path
        self.shown = ""  # what has been printed, so the rest can follow afterwards
        self._offset = 0  # bytes of the file printed so far

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        cut = data.rfind(b"\n") + 1  # whole lines only; a partial line waits for its end
        if cut:
            self._offset += cut
            text = _text(data[:cut])
            self.shown += text
            sys.stdout.write("".join(f"[rank 0] {line}\n" for line in text.splitlines()))
            sys.stdout.flush()


class _Job:
    """The processes of one launch and what has been heard from them."""

    def __init__(self, specs: list[_child.RankSpec], start_method: str, live: _LiveOutput | None,
                 store: _loopback_store | None):
        self.specs = specs
        self.world_size = len(specs)
        self.ctx = _context(start_method)
        self.live = live
        self.store = store
        self.procs: list = []
        self.pids: list[int] = []
        self.conns: dict = {}  # reading end of each rank's result pipe, until heard from
        self.results: dict[int, object] = {}
        self.failures: dict[int, tuple[str, str, str]] = {}
        self.running: list[int] = []
        self.stacks: dict[int, str] = {}  # rank -> its Python stack at the deadline
        self.stack_starts: dict[int, int] = {}  # rank -> where that stack begins in its stderr file
        self.lifeline = None  # write end; closing it (or dying) ends every rank still alive

    def start(self) -> None:
        lifeline, self.lifeline = self.ctx.Pipe(duplex=False)
        inherited = self.lifeline.fileno() if self.ctx.get_start_method() == "fork" else None
        for spec in self.specs:
            reader, writer = self.ctx.Pipe(duplex=False)
            proc = self.ctx.Process(target=_child.run_rank, name=f"ddp_lib-rank{spec.rank}", daemon=False,
                                    args=(spec, writer, lifeline, inherited))
            self.procs.append(proc)
            self.conns[spec.rank] = reader
            proc.start()
            self.pids.append(proc.pid)
            writer.close()
        lifeline.close()

    def wait(self, timeout: float | None) -> None:
        """Wait until every rank has reported, one has failed, or the deadline passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._wait_until(deadline, stop_at_failure=True)
        if self.failures:
            # Other ranks often fail at the same moment (all raise, or a peer's collective
            # breaks): hear them too, so the report does not depend on which pipe won.
            self._wait_until(time.monotonic() + FAILURE_GRACE_S, stop_at_failure=False)
        elif not self.running:
            self._join_finished()
        else:
            self._dump_stacks()

    def _wait_until(self, deadline: float | None, stop_at_failure: bool) -> None:
        notice_at = time.monotonic() + QUIET_NOTICE_S if self.store is not None else None
        while self.conns and not (stop_at_failure and self.failures):
            now = time.monotonic()
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                if stop_at_failure:
                    self.running = sorted(self.conns)
                return
            if notice_at is not None and now >= notice_at:
                if self._all_started():
                    notice_at = None
                    self._notice_if_nobody_joined()
                else:  # still starting (a busy machine): not the silence this notice is about
                    notice_at = now + 1.0
            # A rank is watched through its result pipe and its process sentinel until heard from.
            watched = {}
            for rank, conn in self.conns.items():
                watched[conn] = watched[self.procs[rank].sentinel] = rank
            pause = [t for t in (remaining, OUTPUT_POLL_S if self.live else None,
                                 None if notice_at is None else max(0.0, notice_at - now)) if t is not None]
            for ready in wait(list(watched), min(pause) if pause else None):
                rank = watched[ready]
                if rank in self.conns:
                    self._receive(rank)
            if self.live:
                self.live.poll()

    def _all_started(self) -> bool:
        """Whether every rank has reached ddp_lib's code (its first act creates its output file)."""
        return all(os.path.exists(spec.stdout_path) for spec in self.specs)

    def _notice_if_nobody_joined(self) -> None:
        try:
            joined = self.store.anyone_joined()
        except Exception:  # the notice is a courtesy: never let it fail the launch
            return
        if not joined:
            print(f"[ddp_lib] {QUIET_NOTICE_S:g} s in, no rank has reached the rendezvous store yet (still waiting; "
                  "a worker that never joins a process group can ignore this)", file=sys.stderr, flush=True)

    def _dump_stacks(self) -> None:
        """Ask the ranks still running to write their Python stacks (faulthandler), to name
        where each was in the timeout error."""
        if _child.STACK_DUMP_SIGNAL is None:
            return
        for rank in self.running:
            self.stack_starts[rank] = _size(self.specs[rank].stderr_path)
            try:
                os.kill(self.pids[rank], _child.STACK_DUMP_SIGNAL)
            except OSError:
                pass
        time.sleep(STACK_DUMP_WAIT_S)
        for rank, start in self.stack_starts.items():
            with open(self.specs[rank].stderr_path, "rb") as f:
                f.seek(start)
                self.stacks[rank] = f.read().decode("utf-8", errors="replace")

    def first_failure(self) -> int:
        """The rank to blame: the lowest one that failed on its own, rather than because a
        peer's failure broke a collective (a closed or reset connection, torch's Dist*Error)."""
        own = [rank for rank, (exc_type, message, _) in self.failures.items()
               if not is_peer_failure(exc_type, message)]
        return min(own or self.failures)

    def _receive(self, rank: int) -> None:
        conn = self.conns[rank]
        proc = self.procs[rank]
        try:
            if not conn.poll() and proc.is_alive():
                return
            blob = conn.recv_bytes()
        except (EOFError, OSError):
            proc.join(1)
            started = os.path.exists(self.specs[rank].stdout_path)  # the child's first act is to create it
            self.failures[rank] = ("", _describe_exit(proc.exitcode, started), "")
        else:
            try:
                message = pickle.loads(blob)
            except Exception as exc:
                self.failures[rank] = (type(exc).__qualname__,
                                       f"its return value cannot be unpickled in the launching process: {exc}", "")
            else:
                if message[0] == "ok":
                    self.results[rank] = message[1]
                else:
                    self.failures[rank] = message[1:]
        del self.conns[rank]
        conn.close()

    def _join_finished(self) -> None:
        end = time.monotonic() + EXIT_GRACE_S
        for proc in self.procs:
            proc.join(max(0.0, end - time.monotonic()))

    def _signal_groups(self, sig: int) -> None:
        # Each rank leads its own process group: this reaches whatever the worker started too,
        # whether the rank itself is still alive or not.
        if not hasattr(os, "killpg"):
            return
        for pid in self.pids:
            try:
                os.killpg(pid, sig)
            except OSError:
                pass

    def stop(self) -> None:
        """Stop every rank still alive, and every process a rank started: SIGTERM, then
        SIGKILL after a grace period."""
        alive = [p for p in self.procs if p.is_alive()]
        for proc in alive:
            proc.terminate()
        self._signal_groups(signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S
        for proc in alive:
            proc.join(max(0.0, end - time.monotonic()))
        for proc in alive:
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._signal_groups(signal.SIGKILL)
        for proc in self.procs:
            proc.close()
        for conn in self.conns.values():
            conn.close()
        if self.lifeline is not None:
            self.lifeline.close()
        if self.live:
            self.live.poll()

    def read_outputs(self) -> dict[int, tuple[str, str]]:
        # A stack written at the deadline goes in the error, not in the rank's stderr: it
        # holds thread addresses that change from run to run.
        return {s.rank: (_read(s.stdout_path), _read(s.stderr_path, self.stack_starts.get(s.rank)))
                for s in self.specs}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read(path: str, limit: int | None = None) -> str:
    """The text of ``path``, its first ``limit`` bytes if given ("" if it does not exist)."""
    try:
        with open(path, "rb") as f:
            data = f.read() if limit is None else f.read(limit)
    except FileNotFoundError:
        return ""
    return _text(data)


def _text(data: bytes) -> str:
    # As a file opened in text mode reads: universal newlines.
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _describe_exit(exitcode: int | None, started: bool = True) -> str:
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name} before returning a result"
    if not started:
        # Under spawn and forkserver a child imports the main script first: a script that
        # launches at import makes each child try to launch too, which multiprocessing refuses.
        return (f"exited with code {exitcode} while starting, before the worker ran (its error went to this "
                "process's stderr); if a script launches the ranks, put the launch under "
                '`if __name__ == "__main__":`, since each rank imports the main script')
    return f"exited with code {exitcode} before returning a result"


def _show(outputs: dict[int, tuple[str, str]], with_stderr: bool, already_shown: str = "") -> None:
    for rank in sorted(outputs):
        out, err = outputs[rank]
        if rank == 0 and out.startswith(already_shown):
            out = out[len(already_shown):]
        for text, stream in ((out, sys.stdout), (err if with_stderr else "", sys.stderr)):
            if text:
                stream.write("".join(f"[rank {rank}] {line}\n" for line in text.splitlines()))
                stream.flush()


# `from ddp_lib import launch, process_group` then `launch(...)`, `with process_group(...)`:
# both modules are callable as their function (see ddp_lib/__init__.py).
make_callable(__name__)
make_callable("ddp_lib.process_group")
