"""What runs first in each child process that ddp_lib's launcher starts.

It points the rank's stdout/stderr at ``stdout.log``/``stderr.log`` in its own folder
(:mod:`ddp_lib.launch._output`), sets the rank's environment, imports the worker by name (so an
edited module takes effect on the next launch) and runs it. Its record goes to that folder as a
torchrun rank's does, with the same writers (:mod:`ddp_lib.launch._record`): ``rank.json`` before
the worker runs, then ``result.json`` (its return value, pickled) or ``error.json`` (its exception),
each written whole; the rank answers a request for its stacks there too. Then it sends an empty
message on its pipe to the launcher, which carries no record: it only wakes the launcher to read
the folder (the pipe's end of file, when the rank ends, does the same for a rank that wrote
nothing). A watchdog ends the process, and every process it started, if the launching process
dies, so a killed notebook kernel leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import pkgutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ddp_lib.errors import Failure, failure_of
from ddp_lib.launch import _record
from ddp_lib.launch._output import NO_ROOM, RankOutput, remove_if_left_by_the_dead
from ddp_lib.launch._processes import descendants, kill_all
from ddp_lib.launch._stacks import answer_requests

# How often the rank checks that the worker left MASTER_ADDR/MASTER_PORT alone.
WATCH_POLL_S = 0.02
# The signal on which a rank writes every thread's Python stack to its stderr file, for a person
# (`kill -USR1 PID`); the launcher asks for the stacks as data instead (ddp_lib.launch._stacks).
STACK_DUMP_SIGNAL = signal.SIGUSR1 if hasattr(signal, "SIGUSR1") else None


def write_stacks_on_signal() -> None:
    """Have faulthandler write every thread's stack to stderr on STACK_DUMP_SIGNAL (a rank of the
    launcher, or of torchrun under ``python -m ddp_lib run``)."""
    if STACK_DUMP_SIGNAL is None:
        return
    # A stderr without a file descriptor (captured by a test) cannot take the stacks.
    with contextlib.suppress(ValueError, OSError):
        faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True)


@dataclass
class RankSpec:
    """Everything one rank is told, pickled once into the child."""

    rank: int
    world_size: int
    fn_ref: str
    args_blob: bytes  # pickle of (args, kwargs): unpickled only after sys.path is set
    pass_world_size: bool  # fn(rank, world_size, *args) (ddp_lib.launch) or fn(rank, *args) (ddp_lib.mp)
    env: dict[str, str]
    output: RankOutput  # its directory is removed by the watchdog if the launcher dies before removing it
    sys_path: list[str]
    cwd: str
    store_env: dict[str, str] | None  # MASTER_ADDR/MASTER_PORT the worker must not change, if any
    # ddp_lib.mp: sys.exit()/exit() end the rank as under torch.multiprocessing (code 0 or None:
    # a finished rank whose result is None; another code: the rank exited with it).
    exit_like_torch: bool = False
    # ddp_lib.live: this rank's end of a duplex pipe to the launching process, passed to the worker
    # as ``commands=`` (the cells it runs come that way, and their outcomes go back).
    commands: object = None
    # The launching process's own folder (multiprocessing's, with its forkserver's socket), which the
    # watchdog removes if the launcher was killed: nothing else would until the next launch's sweep.
    launcher_folder: str | None = None


def _own_process_group() -> None:
    """Make this rank the leader of a new session, so that every process the worker starts
    (subprocess, a multiprocessing helper, a shell) can be stopped with it: the launcher
    signals the whole group, and so does the watchdog if the launcher dies."""
    if not hasattr(os, "setsid"):  # Windows: no process groups of this kind
        return
    try:
        os.setsid()
    except OSError:  # already a group leader (not under multiprocessing's start methods)
        pass


def _watch_lifeline(lifeline, output: RankOutput, launcher_folder: str | None) -> None:
    # Only the launching process holds the pipe's write end: end of file means it has died
    # (or finished without us), and nothing else would ever stop this process or remove the
    # directory that holds the ranks' output.
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    output.remove_logdir()
    if launcher_folder:  # removed only once its owner record proves the launcher has ended
        remove_if_left_by_the_dead(launcher_folder, wait=1.0)
    kill_all(descendants(os.getpid()))
    if hasattr(os, "killpg") and os.getpgid(0) == os.getpid():  # only a group this rank leads
        try:
            os.killpg(os.getpid(), signal.SIGKILL)  # this rank and everything it started
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


class _Reporter:
    """Writes the rank's record to its folder and wakes the launcher, from whichever thread has
    something to say first; then the process ends."""

    def __init__(self, rank: int, conn):
        self._rank = rank
        self._conn = conn
        self._lock = threading.Lock()

    def finish(self, code: int, outcome: tuple) -> None:
        """Write ``outcome`` (("ok", value) or ("error", Failure)) as torchrun's ranks write theirs
        (``result.json`` or ``error.json``, :mod:`ddp_lib.launch._record`), flush the streams, wake the
        launcher and end the process at once (never returns)."""
        with self._lock:  # held until the process ends: nothing else is written
            _flush_streams()
            if not _write_record(self._rank, outcome):
                code = 1
            with contextlib.suppress(OSError):  # a launcher that has gone: the watchdog ends this rank
                self._conn.send_bytes(b"")  # "read my folder": the record itself is there
            _leave(code)

    def exit_without_result(self, code: int) -> None:
        """End the process with ``code`` and send nothing (never returns): the launcher reads
        the exit code, as torch.multiprocessing does."""
        with self._lock:
            _flush_streams()
            _leave(code)


def _write_record(rank: int, outcome: tuple) -> bool:
    """Write this rank's result (``("ok", value)``) or failure (``("error", Failure)``) to its folder;
    False if what it wrote is a failure: the worker's, a value that cannot be pickled, or a result
    that found no room. A failure that finds no room either leaves nothing: the launcher then says
    how the rank ended."""
    kind, payload = outcome
    failure = payload
    if kind == "ok":
        try:
            _record.write_result(rank, payload)
            return True
        except _record.ResultNotSent as exc:
            failure = Failure("", str(exc), traceback.format_exc(), time=time.time())
        except OSError as exc:  # a full disk, a quota, a file size limit, most likely
            with contextlib.suppress(OSError):
                _record.discard_partial(_record.RESULT_FILE)
            path = _record.this_rank_dir() / _record.RESULT_FILE
            fix = ": make room there, or set TMPDIR to a folder with room" if exc.errno in NO_ROOM else ""
            failure = Failure("", f"returned, but its result could not be written to {path}, where ddp_lib's launcher "
                              f"reads it ({exc.strerror or exc}){fix}", traceback.format_exc(), time=time.time())
    with contextlib.suppress(OSError):
        _record.write_failure(failure)
    return False


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _leave(code: int) -> None:
    # Whatever the worker started, in this rank's group or in a session of its own, ends with
    # the rank: once the rank has exited, a process in another session can no longer be found.
    kill_all(descendants(os.getpid()))
    # Leave without freeing anything. Three reasons: the groups and locals kept alive against
    # gloo's teardown deadlock (_call_keeping_locals) must never be freed; no interpreter shutdown
    # runs, where a gloo thread that asks for the GIL aborts the process (torch issue #190489,
    # lesson 02); and under fork/forkserver multiprocessing ends its children with os._exit too.
    os._exit(code)


def _store_env_changed(expected: dict[str, str]) -> str | None:
    """Why this rank must stop, if the worker changed MASTER_ADDR/MASTER_PORT under ddp_lib.launch."""
    # Every rank is a client of the store the launcher hosts on the port in MASTER_PORT: a
    # worker that sets its own port would dial a port nobody serves and wait for half an hour.
    for name, value in expected.items():
        now = os.environ.get(name)
        if now != value:
            return (f"set {name}={now!r}, but under ddp_lib.launch the launcher hosts the rendezvous store "
                    f"and sets {name}={value!r} itself: leave MASTER_ADDR/MASTER_PORT alone "
                    "(os.environ.setdefault keeps a tutorial's setup() working), or launch with "
                    "ddp_lib.mp.labelled_spawn, which leaves them to the worker")
    return None


class _RegistryThatKeeps(dict):
    """torch's registry of live process groups (``distributed_c10d._pg_map``), which also appends
    every group registered in it to ``kept``, so that no group is ever destroyed before the process
    ends: not by ``destroy_process_group()`` with a DDP model still alive, nor by that model when it
    is freed later, inside a function the worker calls (see _call_keeping_locals for why that can
    deadlock). Held from the moment the group is created, not found later by a poll, which a short
    worker on a busy machine can outrun.
    torch 2.13 (tools/gloo_shutdown_check.py): inner-cleanup --unkept groups 15 of 52 hung, --unkept frame 0 of 200."""

    def __init__(self, registry: dict, kept: list) -> None:
        super().__init__(registry)
        self.kept = kept
        kept.extend(registry)

    def __setitem__(self, group, value) -> None:  # torch registers a new group with pg_map[pg] = ...
        self.kept.append(group)
        super().__setitem__(group, value)


def _keep_process_groups(kept: list) -> None:
    """Have every process group this rank creates appended to ``kept`` (see _RegistryThatKeeps)."""
    from torch.distributed import distributed_c10d

    if isinstance(getattr(distributed_c10d, "_pg_map", None), dict):  # torch's global, read through _world.pg_map
        distributed_c10d._pg_map = _RegistryThatKeeps(distributed_c10d._pg_map, kept)


def _watch(store_env: dict[str, str], reporter: _Reporter) -> None:
    while True:
        time.sleep(WATCH_POLL_S)
        problem = _store_env_changed(store_env)
        if problem:
            reporter.finish(1, ("error", Failure("", problem, time=time.time())))


def _call_keeping_locals(fn, args: tuple, kwargs: dict, kept: list):
    """``fn(*args, **kwargs)``, with fn's frame appended to ``kept`` so that its locals outlive the call.

    A worker's locals (a DDP model, hence its reducer and process group) are otherwise freed as
    it returns, while this thread holds the GIL. A worker that destroyed its group (the
    tutorial's ``cleanup()``) leaves the reducer holding the last reference, and the reducer is
    freed with the GIL held (torch 2.13 binds it with a plain ``std::shared_ptr`` holder,
    ``torch/csrc/distributed/c10d/init.cpp``; only ProcessGroup and Work objects release the GIL
    in their destructor). The group's destructor (``~ProcessGroupGloo``) then joins gloo's
    threads, and one of them may be waiting for the GIL to free the last finished work of a
    backward pass (that work holds a Python object: the contextvars context that autograd stashes
    in thread-local state): a deadlock. Held here, they are never freed: the process ends with
    os._exit. This covers the worker's own frame; _keep_process_groups covers groups whose last
    user dies in a function the worker calls.
    torch 2.13 (tools/gloo_shutdown_check.py): cleanup-returned --unkept both 17 of 49 hung, kept 0 of 200.
    """
    def note_first_frame(frame, event, arg):
        if event == "call":
            kept.append(frame)
            sys.setprofile(None)

    sys.setprofile(note_first_frame)
    try:
        return fn(*args, **kwargs)
    finally:
        sys.setprofile(None)


def _describe(exc: BaseException) -> Failure:
    """The record of ``exc`` (:class:`ddp_lib.errors.Failure`), even when its ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception as str_error:
        message = f"(its message could not be made: str() raised {type(str_error).__qualname__}: {str_error})"
    try:
        if isinstance(exc, SyntaxError) and exc.filename and os.path.isfile(exc.filename):
            # In a file the worker imports: its file, line and caret say it all; importlib's
            # frames above them are nothing the author can act on.
            tb = "".join(traceback.format_exception_only(exc))
        else:
            tb = "".join(traceback.format_exception(exc))
    except Exception:
        tb = "".join(traceback.format_tb(exc.__traceback__)) + f"{type(exc).__qualname__}: {message}\n"
    return failure_of(exc, message, tb)


def _exit_code(exc: SystemExit) -> int:
    """The exit code a multiprocessing child ends with after ``exc`` (as multiprocessing's
    BaseProcess._bootstrap: None is 0, an int is itself, anything else is printed and is 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_rank(spec: RankSpec, wake_conn, lifeline, inherited_lifeline_fd: int | None) -> None:
    """Run one rank of a launch; its record goes to its folder (``spec.output.folder``), and an empty
    message on ``wake_conn`` tells the parent to read it."""
    if not spec.output.capture():  # the output directory is gone: the launcher died while this rank started
        os._exit(1)
    _record.use_rank_dir(spec.output.folder)
    write_stacks_on_signal()  # for a person's `kill -USR1`; the launcher asks through answer_requests
    answer_requests(*_record.stack_files(Path(spec.output.folder)))
    _own_process_group()
    if inherited_lifeline_fd is not None:
        os.close(inherited_lifeline_fd)  # under fork every child inherits the write end
    threading.Thread(target=_watch_lifeline, args=(lifeline, spec.output, spec.launcher_folder), daemon=True).start()
    reporter = _Reporter(spec.rank, wake_conn)
    os.environ.clear()
    os.environ.update(spec.env)
    with contextlib.suppress(OSError):  # where it stands in the job, as a torchrun rank writes it first
        _record.write_rank()
    sys.path[:] = spec.sys_path
    os.chdir(spec.cwd)
    if spec.store_env:
        threading.Thread(target=_watch, args=(spec.store_env, reporter), daemon=True).start()
    groups: list = []  # every process group created: never freed, see _keep_process_groups
    kept: list = []  # the worker's frame or exception: never freed, see _call_keeping_locals
    try:
        import torch

        torch.set_num_threads(int(spec.env["OMP_NUM_THREADS"]))
        # A rank forked from the forkserver would inherit its random state, so every rank (and
        # every launch) would draw the same unseeded numbers; a fresh interpreter, as under
        # torch.multiprocessing.spawn, seeds itself from the OS. Do the same. (Python's random is
        # reseeded after fork by the random module itself.)
        torch.seed()
        # torch.distributed read TORCH_DISTRIBUTED_DEBUG when the forkserver imported it;
        # read it again so env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} takes effect.
        import torch.distributed as dist

        dist.set_debug_level_from_env()
        _keep_process_groups(groups)
        fn = pkgutil.resolve_name(spec.fn_ref)
        args, kwargs = pickle.loads(spec.args_blob)
        leading = (spec.rank, spec.world_size) if spec.pass_world_size else (spec.rank,)
        if spec.commands is not None:
            kwargs = {**kwargs, "commands": spec.commands}
        value = _call_keeping_locals(fn, (*leading, *args), kwargs, kept)
    except SystemExit as exc:
        kept.append(exc)
        if not spec.exit_like_torch:
            reporter.finish(1, ("error", _describe(exc)))
        code = _exit_code(exc)
        if code == 0:
            reporter.finish(0, ("ok", None))
        reporter.exit_without_result(code)
    except BaseException as exc:  # report everything, KeyboardInterrupt and SystemExit included
        kept.append(exc)  # its traceback holds the worker's frames: keep them too
        reporter.finish(1, ("error", _describe(exc)))
    # The watcher polls: a worker that changed MASTER_ADDR/MASTER_PORT and finished before its next
    # look must be told too, or it passes by luck of timing.
    if spec.store_env and (problem := _store_env_changed(spec.store_env)):
        reporter.finish(1, ("error", Failure("", problem, time=time.time())))
    reporter.finish(0, ("ok", value))
