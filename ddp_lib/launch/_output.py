"""Where each rank's stdout and stderr go, and how they come back: ``stdout.log`` and
``stderr.log`` in the rank's own folder, named as torchrun's ``--redirects`` names them, in a
temporary directory per launch (:class:`RankOutput`: ``<directory>/<rank>/``, the folder that holds
the rank's whole record, :mod:`ddp_lib.launch._record`); rank 0's shown while the job runs
(:class:`LiveOutput`), every rank's read once it is done as it stays on screen (:func:`output_text`:
a line redrawn with carriage returns, a progress bar, is one line in its last state), the other
ranks' printed in rank order (:func:`print_other_ranks`). Under torchrun, whose ranks write their
own files, :class:`FollowedFiles` prints them as they grow.

The child points its stdout/stderr at its files (:meth:`RankOutput.capture`); :class:`ddp_lib.launch._job.Job`
makes each rank's folder, polls the live view and reads the files (``_record.read_output``, the reader
of torchrun's rank folders); :mod:`ddp_lib.launch` first removes the directories of killed launches
(:func:`sweep_orphaned_logdirs`), then makes its own (:func:`output_dir`) and shows the rest.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import multiprocessing
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ddp_lib.launch._processes import pid_alive, start_time


def _label(rank: int) -> str:
    return f"[rank {rank}] "


_PREFIX = _label(0)
# A folder the launcher makes in the temporary directory: "ddp_lib-<random>", holding OWNER_FILE. Short:
# the forkserver's socket lives in one, and a Unix socket's path may not exceed about 100 bytes.
_FOLDER_PREFIX = "ddp_lib-"
OWNER_FILE = ".ddp_lib-owner.json"
# A rank's output files in its folder, as torchrun's --redirects names them (DefaultLogsSpecs.reify,
# torch/distributed/elastic/multiprocessing/api.py), whoever started the rank.
STDOUT_FILE, STDERR_FILE = "stdout.log", "stderr.log"


def _machine() -> dict[str, str] | None:
    """What names this boot of this machine and this process's PID namespace (a container has its
    own), or None where they cannot be read (no /proc: macOS, Windows)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return {"boot": boot, "pid_namespace": os.readlink("/proc/self/ns/pid")}
    except OSError:
        return None


def owned_folder() -> str:
    """A fresh folder in the temporary directory ("ddp_lib-<random>") with a record of its
    owner, this process, by which :func:`sweep_orphaned_logdirs` can tell it was left by a launcher
    that died. The caller removes it."""
    folder = tempfile.mkdtemp(prefix=_FOLDER_PREFIX)
    owner = {**(_machine() or {}), "pid": os.getpid(), "start_time": start_time(os.getpid())}
    with open(os.path.join(folder, OWNER_FILE), "w") as f:
        json.dump(owner, f)
    return folder


@contextlib.contextmanager
def output_dir() -> Iterator[str]:
    """A fresh folder for one launch's output files (:func:`owned_folder`), removed on the way out."""
    folder = owned_folder()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def own_multiprocessing_folder() -> str | None:
    """Make multiprocessing's folder for this process (where the forkserver's socket lives; else a
    ``pymp-*`` folder) one of :func:`owned_folder`'s, so that what a launcher killed with SIGKILL
    leaves can be proven its own (:func:`remove_if_left_by_the_dead`). Only while multiprocessing
    has none yet; returns the folder if it is one of ours, else None."""
    # multiprocessing.util.get_temp_dir() makes the folder on first use and keeps its path here;
    # there is no public way to choose it.
    config = multiprocessing.current_process()._config
    if config.get("tempdir") is None:
        config["tempdir"] = owned_folder()
        # As get_temp_dir does for its own: removed at exit.
        multiprocessing.util.Finalize(None, _forget_multiprocessing_folder, args=(config["tempdir"],),
                                      exitpriority=-100)
    folder = config["tempdir"]
    return folder if os.path.exists(os.path.join(folder, OWNER_FILE)) else None


def _forget_multiprocessing_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    multiprocessing.current_process()._config["tempdir"] = None


def _left_by_the_dead(folder: str, machine: dict[str, str]) -> bool:
    """Whether ``folder`` holds an owner record that proves its owner has ended: made on this boot,
    in this PID namespace, by a process that no longer runs (its id free, or taken by a process
    that started at another time). A folder without one is not the launcher's to judge."""
    try:
        with open(os.path.join(folder, OWNER_FILE)) as f:
            owner = json.load(f)
        pid, started = owner["pid"], owner["start_time"]
        same_place = all(owner[key] == value for key, value in machine.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not same_place or not isinstance(pid, int) or not isinstance(started, int):
        return False
    return not pid_alive(pid) or start_time(pid) != started


def remove_if_left_by_the_dead(folder: str, wait: float = 0.0) -> None:
    """Remove ``folder`` once its owner record proves its owner has ended (:func:`_left_by_the_dead`),
    waiting up to ``wait`` seconds for that (a process that is being killed closes its files first)."""
    machine = _machine()
    end = time.monotonic() + wait
    while machine:
        if _left_by_the_dead(folder, machine):
            shutil.rmtree(folder, ignore_errors=True)
            return
        if time.monotonic() >= end:
            return
        time.sleep(0.05)


def sweep_orphaned_logdirs() -> None:
    """Remove the folders of launching processes that were killed (SIGKILL leaves no chance to
    clean up; the ranks' watchdogs remove their launch's, this catches the rest): only those whose
    owner record proves their launcher has ended on this machine since it booted. Where that
    cannot be known (no /proc), nothing is removed."""
    machine = _machine()
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root) if machine else []
    except OSError:
        return
    for name in names:
        folder = os.path.join(root, name)
        if name.startswith(_FOLDER_PREFIX) and _left_by_the_dead(folder, machine):
            shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class RankOutput:
    """One rank's folder in its launch's output directory, ``<logdir>/<rank>/``, and its stdout and
    stderr files there (pickled into the child). The folder holds the rank's record too, as a
    torchrun rank's folder does (:mod:`ddp_lib.launch._record`)."""

    logdir: str
    rank: int

    @property
    def folder(self) -> str:
        return os.path.join(self.logdir, str(self.rank))

    @property
    def stdout_path(self) -> str:
        return os.path.join(self.folder, STDOUT_FILE)

    @property
    def stderr_path(self) -> str:
        return os.path.join(self.folder, STDERR_FILE)

    def make_folder(self) -> None:
        """In the launcher, before the rank starts: make its folder (as torchrun's agent makes its ranks')."""
        os.makedirs(self.folder, exist_ok=True)

    def capture(self) -> bool:
        """In the child: send this process's stdout and stderr (file descriptors 1 and 2, so what
        C code and subprocesses write too) to the rank's files, line by line. False when the output
        directory is gone: the launcher died while this rank started."""
        try:
            _redirect(1, self.stdout_path)
            _redirect(2, self.stderr_path)
        except FileNotFoundError:
            return False
        sys.stdout = _capture_stream(1, self.stdout_path, sys.stdout)
        sys.stderr = _capture_stream(2, self.stderr_path, sys.stderr)
        return True

    def remove_logdir(self) -> None:
        """Remove the launch's whole output directory (the child's watchdog, when the launcher has died)."""
        shutil.rmtree(self.logdir, ignore_errors=True)

    def started(self) -> bool:
        """Whether the rank got as far as capturing its output (the child's first act creates the files)."""
        return os.path.exists(self.stdout_path)


NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a full disk, a quota, a file size limit


class _CaptureFile(io.FileIO):
    """File descriptor 1 or 2 of a rank, which the launcher points at a file of its own: a write
    that finds no room says so, rather than reading as the worker's fault."""

    def write(self, data) -> int:
        try:
            return super().write(data)
        except OSError as e:
            if e.errno not in NO_ROOM:
                raise
            raise OSError(e.errno, f"{e.strerror}: writing to {self.name}, the file where ddp_lib's launcher "
                          "captures this rank's output (make room there, or set TMPDIR to a folder with room)"
                          ) from None


def _capture_stream(fd: int, path: str, like):
    """A line-buffered text stream over ``fd`` (redirected to ``path``), encoded as ``like`` was."""
    raw = _CaptureFile(fd, "w", closefd=False)
    raw.name = path
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=getattr(like, "encoding", None) or "utf-8",
                            errors=getattr(like, "errors", None) or "strict", line_buffering=True, write_through=True)


def _redirect(fd: int, path: str) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)


def live_view(rank0: RankOutput, show_output: bool | str) -> LiveOutput | None:
    """What prints rank 0's output as it comes: stdout and stderr (``show_output=True``), stdout
    only ("stdout"), or nothing (False)."""
    if not show_output:
        return None
    return LiveOutput(rank0.stdout_path, rank0.stderr_path if show_output is True else None)


def print_other_ranks(outputs: dict[int, tuple[str, str]], show_output: bool | str) -> None:
    """After the job, every rank's (stdout, stderr) but rank 0's (shown as it came), in rank
    order, each line labelled ``[rank N]``: stdout and stderr (``show_output=True``), stdout
    only ("stdout"), or nothing (False)."""
    if not show_output:
        return
    for rank in sorted(outputs):
        if rank == 0:
            continue
        out, err = outputs[rank]
        for text, stream in ((out, sys.stdout), (err if show_output is True else "", sys.stderr)):
            if text:
                stream.write("".join(f"{_label(rank)}{line}\n" for line in text.splitlines()))
                stream.flush()


class GrowingFile:
    """A file read as it grows: :meth:`unread` gives what was written past ``offset``, which the
    caller moves on by what it has used. A file made again at the same path (a torchrun restart
    that spends no restart count deletes its attempt's folder and makes the same paths again) is
    read from its start: the file is kept open between reads, so its inode cannot go to the new
    one. :meth:`close` when done (Windows cannot delete a file held open)."""

    def __init__(self, path: str | os.PathLike):
        self.path = path
        self.offset = 0
        self._file = None
        self.done = False

    def unread(self) -> bytes:
        if self.done:
            return b""
        try:
            now = os.stat(self.path)
        except OSError:  # not made yet, or deleted meanwhile
            return b""
        if self._file is None or not os.path.samestat(os.fstat(self._file.fileno()), now):
            if self._file is not None:
                self._file.close()
            self._file = None
            try:
                self._file = open(self.path, "rb")
            except OSError:
                return b""
            self.offset = 0
        if os.fstat(self._file.fileno()).st_size < self.offset:  # cut short: read it again
            self.offset = 0
        self._file.seek(self.offset)
        return self._file.read()

    def close(self) -> None:
        """Done reading: the file is closed, and :meth:`unread` gives nothing from now on."""
        self.done = True
        if self._file is not None:
            self._file.close()
            self._file = None


class FollowedFiles:
    """Prints the files ``find()`` names at each poll, line by line as they grow, unlabelled
    (torchrun's rank folders: only rank 0 prints in ddp_lib's workers)."""

    def __init__(self, find: Callable[[], Iterable[str | os.PathLike]]):
        self.find = find
        self.files: dict[str | os.PathLike, GrowingFile] = {}

    def poll(self, final: bool = False) -> None:
        """Print the lines finished since the last poll; ``final``: unfinished ones too, and close the files."""
        for path in self.find():
            if path not in self.files:
                self.files[path] = GrowingFile(path)
            file = self.files[path]
            data = file.unread()
            complete = data if final else data[:data.rfind(b"\n") + 1]
            file.offset += len(complete)
            for line in output_text(complete).splitlines():  # a line redrawn with \r: its last state
                if line.strip():
                    print(line, flush=True)
        if final:
            self.close()

    def close(self) -> None:
        for file in self.files.values():
            file.close()


class _LiveStream:
    """One of rank 0's output files, printed to ``target`` (this process's stdout or stderr) as it grows."""

    def __init__(self, path: str, target):
        self.file = GrowingFile(path)
        self.target = target
        self.status = ""  # the unfinished line being redrawn (a progress bar), as on screen now

    def take(self, final: bool) -> tuple[list[str], str]:
        """The lines finished since the last call (each in its last state), and the unfinished
        line if it is being redrawn ("" if none). ``final``: an unfinished line counts as finished."""
        data = self.file.unread()
        cut = len(data) if final else data.rfind(b"\n") + 1
        self.file.offset += cut
        parts = _decode(data[:cut]).split("\n")
        if parts[-1] == "":
            parts.pop()
        lines = [line for line in map(_last_state, parts) if line is not None]
        partial = data[cut:]
        # Only a redrawn line is shown before it ends; other text waits for its newline. (An
        # incomplete UTF-8 character at the end waits too.)
        status = (_last_state(partial.decode("utf-8", errors="ignore")) or "") if b"\r" in partial else ""
        return lines, status

    def write(self, text: str) -> None:
        self.target.write(text)
        self.target.flush()


class LiveOutput:
    """Prints rank 0's stdout (and stderr) while the job runs, labelled ``[rank 0]``: each line
    once it ends, and an unfinished line that the rank redraws with carriage returns (a progress
    bar such as tqdm's) as one line updated in place, as a terminal and Jupyter show ``\r``.

    Jupyter shows stdout and stderr apart. In a terminal they share the screen: a bar shown on
    one is wiped while lines are printed on the other, then drawn again below them.
    """

    def __init__(self, stdout_path: str, stderr_path: str | None = None):
        self.streams = [_LiveStream(stdout_path, sys.stdout)]
        if stderr_path is not None:
            self.streams.append(_LiveStream(stderr_path, sys.stderr))
        self.shared_screen = len(self.streams) > 1 and all(_isatty(s.target) for s in self.streams)

    def poll(self, final: bool = False, keep_open: bool = False) -> None:
        """Print what rank 0 wrote since the last poll. ``final``: the job (or a live cell) is
        over, so an unfinished last line is printed as a line, and the files are closed unless
        ``keep_open`` (ddp_lib.live: the rank lives on to the next cell)."""
        for stream in self.streams:
            lines, status = stream.take(final)
            if lines or status != stream.status:
                self._show(stream, lines, status)
            if final and not keep_open:
                stream.file.close()

    def _show(self, stream: _LiveStream, lines: list[str], status: str) -> None:
        others = [s for s in self.streams if s is not stream and s.status] if self.shared_screen else []
        for other in others:
            other.write(_wipe(other.status))
        text = "".join(f"{_PREFIX}{line}\n" for line in lines) + (f"{_PREFIX}{status}" if status else "")
        if stream.status:  # this stream's bar is on screen: write over it from the start of its line
            first, newline, rest = text.partition("\n")
            text = f"\r{first.ljust(len(_PREFIX + stream.status))}{newline}{rest}" if text else _wipe(stream.status)
        stream.write(text)
        stream.status = status
        for other in others:
            if status:  # this bar now holds the bottom line; the other is drawn again at its next change
                other.status = ""
            else:
                other.write(f"{_PREFIX}{other.status}")


def _wipe(status: str) -> str:
    """Carriage return, spaces over the bar, carriage return: its line left empty."""
    return "\r" + " " * len(_PREFIX + status) + "\r"


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def _last_state(line: str) -> str | None:
    """A line as a terminal leaves it: of a line redrawn with carriage returns (a progress bar),
    its last non-blank state; None if it was wiped (spaces over it, as a bar that clears itself)."""
    if "\r" not in line:
        return line
    states = [state for state in line.split("\r") if state.strip()]
    return states[-1] if states else None


def output_text(data: bytes) -> str:
    """A rank's output as it would stay on screen: each line redrawn with carriage returns in its
    last state (a progress bar's hundreds of updates are one line), wiped lines left out."""
    text = _decode(data)
    if "\r" not in text:
        return text
    *lines, rest = text.split("\n")
    kept = "".join(f"{line}\n" for line in map(_last_state, lines) if line is not None)
    return kept + (_last_state(rest) or "")
