"""What runs first in each child process that ddp_lib's launcher starts.

It points the rank's stdout/stderr at its own files, sets the rank's environment, imports the
worker by name (so an edited module takes effect on the next launch), runs it and sends back
its return value or its exception through a pipe. A watchdog ends the process if the launching
process dies, so a killed notebook kernel leaves nothing behind.
"""

from __future__ import annotations

import os
import pickle
import pkgutil
import signal
import sys
import threading
import traceback


def _redirect(fd: int, path: str) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)


def _watch_lifeline(lifeline) -> None:
    # Only the launching process holds the pipe's write end: end of file means it has died
    # (or finished without us), and nothing else would ever stop this process.
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os.kill(os.getpid(), signal.SIGKILL)


def _call_keeping_locals(fn, args: tuple, kwargs: dict, kept: list):
    """``fn(*args, **kwargs)``, with fn's frame appended to ``kept`` so that its locals outlive the call.

    A worker's locals (a DDP model, hence its reducer and process group) are otherwise freed as
    it returns, while this thread holds the GIL: if the process group dies then, its destructor
    joins gloo's threads, one of which may be waiting for the GIL to free its last finished
    work (see run_rank). Held here, they are never freed: the process ends with os._exit.
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


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped (error summaries stay one line)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def run_rank(rank: int, fn_ref: str, args_blob: bytes, env: dict[str, str],
             stdout_path: str, stderr_path: str, sys_path: list[str], cwd: str, result_conn,
             lifeline, inherited_lifeline_fd: int | None) -> None:
    """Run one rank of a launch; the parent reads ("ok", value) or ("error", ...) from ``result_conn``."""
    _redirect(1, stdout_path)
    _redirect(2, stderr_path)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.reconfigure(line_buffering=True)
    if inherited_lifeline_fd is not None:
        os.close(inherited_lifeline_fd)  # under fork every child inherits the write end
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = sys_path
    os.chdir(cwd)
    kept: list = []  # the worker's frame or exception: never freed, see _call_keeping_locals
    try:
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        # torch.distributed read TORCH_DISTRIBUTED_DEBUG when the forkserver imported it;
        # read it again so env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} takes effect.
        import torch.distributed as dist

        dist.set_debug_level_from_env()
        fn = pkgutil.resolve_name(fn_ref)
        args, kwargs = pickle.loads(args_blob)
        value = _call_keeping_locals(fn, (rank, int(env["WORLD_SIZE"]), *args), kwargs, kept)
    except BaseException as exc:  # report everything, KeyboardInterrupt and SystemExit included
        kept.append(exc)  # its traceback holds the worker's frames: keep them too
        code, message = 1, ("error", type(exc).__qualname__, str(exc), traceback.format_exc())
    else:
        code, message = 0, ("ok", value)
    try:
        blob = pickle.dumps(message)
    except Exception as exc:
        code = 1
        blob = pickle.dumps(("error", type(exc).__qualname__,
                             f"the worker's return value cannot be pickled: {exc}", traceback.format_exc()))
    sys.stdout.flush()
    sys.stderr.flush()
    result_conn.send_bytes(blob)
    # Leave without freeing anything: no destructor of the worker's objects runs (a gloo
    # process group's would join threads that may be waiting for the GIL), and nothing
    # else would run anyway under fork/forkserver, where multiprocessing ends its children
    # with os._exit too. Only the streams need flushing, done above.
    os._exit(code)
