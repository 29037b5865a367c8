"""The exceptions the launcher raises in the calling process, a failed rank's record
(:class:`Failure`), and how to tell a rank that failed on its own from one whose collective broke
because a peer failed (from the exception's type and where it was raised, never its words)."""

from __future__ import annotations

import importlib.util
import os
import re
import sysconfig
import time
import traceback
from dataclasses import dataclass
from typing import NamedTuple


def first_line(text: str, if_blank: str = "") -> str:
    """The first non-blank line of ``text``, stripped (error summaries stay one line); ``if_blank``
    when there is none."""
    return next((line.strip() for line in text.splitlines() if line.strip()), if_blank)


def last_line(text: str, if_blank: str = "") -> str:
    """The last non-blank line of ``text``, stripped: a Python traceback's error line, ``Type: message``;
    ``if_blank`` when there is none. ``text`` may be an exception, read as ``str(text)``."""
    return next((line.strip() for line in reversed(str(text).splitlines()) if line.strip()), if_blank)


class Failure(NamedTuple):
    """A failed rank as its record says it (written by the rank itself, whichever way it was started)."""

    exc_type: str  # the exception's type name; "" for a rank that ended without raising (killed, exited)
    message: str
    traceback: str = ""
    # Raised inside torch's communication (a Dist*Error, or a RuntimeError from torch.distributed, DDP or
    # autograd): possibly the echo of a peer's failure (:func:`may_be_echo`).
    echo: bool = False
    time: float | None = None  # when the rank failed (time.time()), as torch's elastic error files say it
    port: int | None = None  # the rank's MASTER_PORT when it raised a DistNetworkError (a port taken?)


# Where torch waits for other ranks: a collective, DDP's own calls, a backward that runs DDP's hooks.
_COMMUNICATING = ("torch/distributed/", "torch/nn/parallel/", "torch/autograd/")


def may_be_echo(exc: BaseException) -> bool:
    """Whether ``exc`` may be the echo of a peer's failure, from its type and where it was raised
    (never from its words): one of torch's DistError (DistBackendError, DistNetworkError, ...), or a
    RuntimeError (as gloo's errors reach Python) raised inside torch.distributed, DDP or autograd.
    Another exception (a TimeoutError, a ValueError, a RuntimeError raised by one's own code) is the
    worker's own failure."""
    if any(cls.__name__ == "DistError" for cls in type(exc).__mro__):
        return True
    if type(exc) is not RuntimeError:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return False
    path = frames[-1].filename
    return installed(path) and any(area in path.replace("\\", "/") for area in _COMMUNICATING)


def failure_of(exc: BaseException, message: str, traceback_text: str) -> Failure:
    """The record of a rank that raised ``exc`` (its message and traceback text made by the caller)."""
    port = None
    if any(cls.__name__ == "DistNetworkError" for cls in type(exc).__mro__):
        port = _whole_number(os.environ.get("MASTER_PORT", ""))
    return Failure(type(exc).__qualname__, message, traceback_text, may_be_echo(exc), time.time(), port)


def _whole_number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def is_peer_failure(failure: tuple) -> bool:
    """Whether a rank's failure may be the echo of a peer's (see :func:`may_be_echo`); a plain
    ``(type, message, traceback)`` without that record is the rank's own."""
    return bool(getattr(failure, "echo", False))


def blamed_rank(failures: dict[int, tuple]) -> int:
    """The rank to blame among ``failures`` (``{rank: Failure}``): the lowest one that failed on its
    own, rather than because a peer's failure broke a collective; when every one may be such an
    echo, the one that failed first (by the times the ranks wrote, as torch's elastic agent blames;
    the lowest of those that failed within SAME_MOMENT_S of the first, or of all without times)."""
    own = [rank for rank, failure in failures.items() if not is_peer_failure(failure)]
    if own:
        return min(own)
    first = min(_time(failure) for failure in failures.values())
    # Ranks that failed together (the same error raised by every rank's collective) are told
    # apart by rank, not by which clock tick came first: the same rank is named on every run.
    return min(rank for rank, failure in failures.items() if _time(failure) <= first + SAME_MOMENT_S)


SAME_MOMENT_S = 1.0  # failures this close to the first count as at the same moment


def _time(failure: tuple) -> float:
    when = getattr(failure, "time", None)
    return float("inf") if when is None else when


def with_silent_ranks(failures: dict[int, tuple], silent: list[int], *, ended: str | None = None
                      ) -> tuple[dict[int, tuple], str]:
    """The one place for ranks that never reported (``silent``), when every failure heard may be a
    peer's echo: the rank that failed first is then among them. ``ended``: they have ended without a
    record (torchrun's folders: killed by a signal, or stopped by torchrun), and each becomes a failure
    with that message, to be blamed; else (the launcher stopped them while they ran) the failures
    stay, and the hint returned names them. Returns (failures, hint)."""
    if not silent or any(not is_peer_failure(f) for f in failures.values()):
        return failures, ""
    if ended is not None:
        return {**{rank: Failure("", ended) for rank in silent}, **failures}, ""
    ranks = f"rank {silent[0]}" if len(silent) == 1 else f"ranks {', '.join(map(str, silent))}"
    return failures, f" (launcher: {ranks} had not reported when the job was stopped; see their output)"


class RemoteTraceback(Exception):
    """The text of a worker's traceback, set as the ``__cause__`` of the error raised in the
    caller (as concurrent.futures does), so the default display shows the worker's file, line
    and code above the one-line summary."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class LaunchInputError(ValueError):
    """Bad input to a launch, found before any process starts. The message is one line."""


class WorkerError(RuntimeError):
    """A rank failed: it raised, or exited without returning a result.

    ``rank``, ``exc_type`` and ``message`` say what happened; ``worker_traceback`` is the
    traceback text from the child (empty if it died without raising); ``tracebacks`` maps
    every rank that raised to its traceback text; ``failures`` maps
    every failed rank to its one-line description; ``outputs`` holds each rank's captured
    output; ``pid`` is the rank's process id and ``exit_code`` its exit code when it ended
    without a message (negative: the signal that killed it), else None.
    """

    def __init__(self, rank: int, exc_type: str, message: str, worker_traceback: str = "",
                 failures: dict[int, str] | None = None, outputs: dict | None = None,
                 pid: int | None = None, exit_code: int | None = None):
        self.rank = rank
        self.pid = pid
        self.exit_code = exit_code
        self.exc_type = exc_type
        self.message = message
        self.worker_traceback = worker_traceback
        self.tracebacks = {rank: worker_traceback} if worker_traceback else {}  # blaming() sets every rank's
        self.failures = failures or {}
        self.outputs = outputs or {}
        self.full_message = message  # the launcher sets it to every line of the worker's message
        self.echo = False  # the blamed failure may be a peer's echo (every failure was; see Failure.echo)
        if exc_type and message:
            summary = f"rank {rank} raised {exc_type}: {message}"
        elif exc_type:  # e.g. a bare KeyboardInterrupt: no ": " with nothing after it
            summary = f"rank {rank} raised {exc_type}"
        else:
            summary = f"rank {rank} {message}"
        super().__init__(summary)
        if worker_traceback:
            self.__cause__ = RemoteTraceback(f"\nin rank {rank}:\n{worker_traceback.rstrip()}")

    @classmethod
    def blaming(cls, failures: dict[int, tuple[str, str, str]], outputs: dict, hint: str = "",
                whole: bool = False, **details) -> WorkerError:
        """The error of a job whose ranks failed (``{rank: (exc_type, message, traceback)}``), as
        the launcher and torchrun's rank folders both report it: the rank :func:`blamed_rank`
        names, its message's first line (``full_message``: every line) without torch's build paths,
        then ``hint``; every failure in one line. ``whole``: every line of the message, for an error
        that is kept rather than raised (nothing shows its traceback, where the rest is).
        ``details``: ``pid``, ``exit_code``."""
        rank = blamed_rank(failures)
        exc_type, message, tb, *_ = failures[rank]
        message = without_build_paths(message)
        described = {r: f"{t}: {first_line(without_build_paths(m))}" if t else first_line(m)
                     for r, (t, m, *_) in sorted(failures.items())}
        shown = message.strip() if whole else first_line(message)
        error = cls(rank, exc_type, shown + hint, tb, described, outputs, **details)
        error.full_message = message.strip() + hint  # every line of it, for the command line
        error.tracebacks = {r: f[2] for r, f in sorted(failures.items()) if f[2]}
        error.echo = is_peer_failure(failures[rank])
        return error


# Where torch's C++ says it was built and what called what: "[/__w/pytorch/pytorch/.../pair.cc:534] ",
# "Exception raised from recvBytes at /__w/...Utils.hpp:671 (most recent call first):" and the
# "frame #3: ..." lines after it. Nothing in them is the learner's to act on.
# Display only (these regular expressions never decide a result, a blame or a stack).
_CPP_LOCATION = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|h|hpp|cu):\d+\]\s*")
_CPP_FRAMES = re.compile(r"^(?:Exception raised from .*\(most recent call first\):|frame #\d+: .*)\n?", re.M)


def without_build_paths(message: str) -> str:
    """``message`` without torch's C++ source locations and C++ call stack."""
    return _CPP_FRAMES.sub("", _CPP_LOCATION.sub("", message)).rstrip()


class LaunchInterrupted(KeyboardInterrupt):
    """The launch was interrupted (Ctrl-C, Jupyter's stop button) and every rank was stopped.
    A KeyboardInterrupt, so that whatever stops on one still stops; shown in a notebook as its
    one line, not as a traceback through the launcher."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        ranks = "rank 0" if world_size == 1 else f"ranks 0-{world_size - 1}"
        super().__init__(f"interrupted: {ranks} stopped")

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback
        return [str(self)]


class LaunchStartError(RuntimeError):
    """The ranks could not all be started; every rank that had started was stopped. One line."""


class LaunchTimeout(TimeoutError):
    """The job passed its deadline; every rank was stopped. ``running`` lists the ranks
    that had not finished; ``stacks`` maps each to the Python stack it was in when stopped
    (its threads' frames, written by the rank as data, ``stack_frames``, and shown in faulthandler's
    layout), shown as the error's cause."""

    def __init__(self, timeout: float, running: list[int], outputs: dict | None = None,
                 stacks: dict[int, str] | None = None, stack_frames: dict[int, list] | None = None):
        self.timeout = timeout
        self.running = running
        self.outputs = outputs or {}
        self.stacks = stacks or {}
        self.stack_frames = stack_frames or {}  # rank -> its threads' stacks as data (errors.stopped_at reads them)
        ranks = ", ".join(str(r) for r in running)
        stopped = f"rank {ranks} still running was stopped" if len(running) == 1 else \
            f"ranks {ranks} still running were stopped"
        super().__init__(f"the job did not finish within its {timeout:g} s deadline; {stopped}")
        where = "".join(f"\nrank {rank} was here when stopped:\n{text.rstrip()}\n"
                        for rank, text in sorted(self.stacks.items()) if text.strip())
        if where:
            self.__cause__ = RemoteTraceback(where)


@dataclass(frozen=True)
class Stopped:
    """Where a rank was when stopped (:func:`stopped_at`)."""

    call: str = ""  # the installed function it was in: "all_reduce (torch/distributed/distributed_c10d.py)"
    line: str = ""  # the innermost line of one's own code: "my_worker.py line 7"
    communicating: bool = False  # inside torch.distributed, DDP or autograd (whose backward runs DDP's all-reduce)
    outside_worker: bool = False  # not in its worker (before it started, or after it returned; a whole stack)
    outer: str = ""  # the outermost line of one's own code, when it is not ``line``: the call that led there


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The calls inside which a rank runs its worker: the launcher's child and torchrun's rank side.
_WORKER_CALLS = ("_call_keeping_locals", "run_this_rank")


def stopped_at(threads: list[dict]) -> Stopped:
    """Where a rank was when stopped, from its threads' stacks as the rank wrote them
    (:mod:`ddp_lib.launch._stacks`: frames innermost first, ``[path, line, function]``); the worker's
    thread is the one inside the launcher's (or torchrun's rank side's) call of the worker."""
    if not isinstance(threads, list) or not threads:
        return Stopped()
    worker_thread = next((t for t in threads if any(f[2] in _WORKER_CALLS for f in t["frames"])), None)
    in_worker = worker_thread is not None
    # No worker running: the main thread (where it would run).
    thread = worker_thread or next((t for t in threads if t.get("main")), threads[0])
    frames = [(str(path), int(line), str(function)) for path, line, function in thread["frames"]]
    if not frames:
        return Stopped()
    cut = next((i for i, f in enumerate(frames) if f[2] in _WORKER_CALLS), 0)
    worker = frames[:cut]  # the worker's frames, inside the call that runs it
    own = [(p, n) for p, n, _ in worker if not installed(p)]
    # The learner's own line rather than this package's helpers, when there is one.
    own = [f for f in own if not _in_package(f[0])] or own
    path, _, function = frames[0]
    call = f"{function} ({short_path(path)})" if installed(path) or not worker else ""
    communicating = any(area in p.replace("\\", "/") for p, _, _ in (worker or frames) for area in _COMMUNICATING
                        if installed(p))
    line = f"{os.path.basename(own[0][0])} line {own[0][1]}" if own else ""
    outer = f"{os.path.basename(own[-1][0])} line {own[-1][1]}" if len(own) > 1 else ""
    return Stopped(call, line, communicating, not in_worker, "" if outer == line else outer)


def installed(path: str) -> bool:
    """Whether ``path`` is a file of the standard library (frozen modules too) or of an installed
    package (site-packages, dist-packages, the user's site)."""
    if path.startswith("<"):
        return True
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return os.path.splitdrive(path)[0] == os.path.splitdrive(stdlib)[0] and \
        os.path.commonpath([os.path.abspath(path), stdlib]) == stdlib


def _in_package(path: str) -> bool:
    """Whether ``path`` is a file of ddp_lib itself."""
    return os.path.abspath(path).startswith(_PACKAGE_DIR + os.sep)


def short_path(path: str) -> str:
    """An installed package's file from its package down (``torch/distributed/...``), else its name."""
    parts = path.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    return os.path.basename(path)


def relative_paths(message: str) -> str:
    """``message`` with the current folder and the folder torch is installed in left out of its
    paths, so that they read ``my_work/classic_ddp.py`` and ``torch/nn/modules/module.py``.
    Display only: the same text on every machine. (``ddp_lib.demos.spawning.short_paths`` instead
    shortens a traceback's files to their name or their package path.)"""
    prefixes = [os.getcwd() + os.sep]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        prefixes.append(os.path.dirname(os.path.dirname(spec.origin)) + os.sep)
    for prefix in prefixes:
        message = message.replace(prefix, "")
    return message


# Display only: a message made stable for a person and a stored lesson output.
_PEER_PORT = re.compile(r"(\[[0-9a-fA-F.:]+\]):\d+")
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*m")


def readable(message: str, limit: int | None = None) -> str:
    """``message`` without what changes from run to run or machine to machine (C++ source
    locations such as ``[/path/pair.cc:553]``, peer ports such as ``[127.0.0.1]:43236``,
    terminal colour codes),
    cut at a word boundary to at most ``limit`` characters."""
    text = _PEER_PORT.sub(r"\1:PORT", _CPP_LOCATION.sub("", _TERMINAL_CODES.sub("", message))).strip()
    if limit is not None and len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " ..."
    return text


# Display only: the line of one's own code shown beside a failure (a checker's sentence).
_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in \S+\n(?P<code>[^\n]*)', re.M)


def own_line(worker_traceback: str) -> str:
    """The innermost line of one's own code in a Python traceback (not the standard library's, an
    installed package's, or this package's), as ``"file.py line 7: code"``; "" when there is none."""
    frames = [(path, line, code.strip()) for path, line, code in _TRACEBACK_FRAME.findall(worker_traceback)
              if not installed(path) and not _in_package(path)]
    if not frames:
        return ""
    path, line, code = frames[-1]
    return f"{os.path.basename(path)} line {line}: {code}" if code else f"{os.path.basename(path)} line {line}"
