"""Processes by id: whether one runs, every process below one, and ids that keep naming the
process they were taken from.

A process id recorded earlier may name another process by the time it is used: once a process
has exited and been reaped, Linux hands its id out again when the counter wraps around
``/proc/sys/kernel/pid_max`` (32768 on many machines; threads take ids from the same pool, so a
busy machine wraps within minutes). A launcher that stops "its" ranks by an id recorded at start
could then stop a rank of another job, whose peers see ``Connection closed by peer``.

:class:`OwnProcess` is taken while the process is known to be ours (just started, or found
below one of ours) and signals only that process: through a pidfd where Linux has them (the
signal cannot reach a later holder of the id), else after checking the process's start time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) pressed inside the block takes effect as the block ends, once.

    For stopping processes, which a second press must not cut short: a process left running
    outlives its launcher, and one that multiprocessing started keeps the launcher waiting at
    exit forever (it joins every child it started). What the block waits for must be bounded,
    since Ctrl-C cannot end it. Only the main thread receives Python's signals; elsewhere, and
    where SIGINT is ignored or not Python's, nothing changes. A press that lands before the block
    has begun raises there, as usual: a caller retries (the stops here can be run again)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield
        return
    pressed = []
    signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    # Only when the block ended normally: an error raised inside it is not hidden behind the press.
    if pressed:
        previous(signal.SIGINT, pressed[-1])  # Python's own handler raises KeyboardInterrupt


def stop_to_the_end(stop: Callable[[], None]) -> bool:
    """Run ``stop``, which holds Ctrl-C itself (:func:`ctrl_c_held`) and can be run again, to its end:
    again if a press lands before it holds presses back. Returns whether Ctrl-C was pressed."""
    pressed = False
    while True:
        try:
            stop()
            return pressed
        except KeyboardInterrupt:
            pressed = True


def pid_alive(pid: int) -> bool:
    """Whether a running process has this id (one owned by another user counts; a zombie,
    which has exited and only waits to be reaped, does not)."""
    if os.name == "nt":
        return _windows_pid_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _state(pid) not in ("Z", "X")


def _windows_pid_alive(pid: int) -> bool:
    # os.kill(pid, 0) would end the process there (TerminateProcess with exit code 0).
    import ctypes

    kernel32 = ctypes.windll.kernel32
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    code = ctypes.c_ulong()
    try:
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (None where there is no such file)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def parent(pid: int) -> int | None:
    """The id of process ``pid``'s parent (/proc/PID/stat field 4), or None where it cannot be read."""
    fields = _stat_fields(pid)
    try:
        return int(fields[1]) if fields else None
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None
    where it cannot be read: with the id, it names one process for as long as the machine runs."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def children_by_parent() -> dict[int, list[int]]:
    """Each process id's children, read from /proc ({} where there is none)."""
    parents: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return {}
    for entry in entries:
        fields = _stat_fields(int(entry))
        try:
            ppid = int(fields[1]) if fields else None
        except (IndexError, ValueError):
            continue
        if ppid is None:
            continue
        parents.setdefault(ppid, []).append(int(entry))
    return parents


def children(pid: int) -> list[int]:
    """The living processes whose parent is ``pid``, read from /proc; [] where there is no /proc."""
    below = _task_children(pid)
    return children_by_parent().get(pid, []) if below is None else below


def _task_children(pid: int) -> list[int] | None:
    """The children of ``pid`` from /proc/PID/task/*/children (a few small files, where reading
    every process's stat costs milliseconds); None where the kernel has no such files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    found = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{task}"):
                return None  # a kernel built without CONFIG_PROC_CHILDREN
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (children, theirs, ...), read from /proc; [] where
    there is no /proc. Finds what a process group does not: a child started in a new session
    (``start_new_session=True``, a daemon) while its parent still lives."""
    found, todo = [], [pid]
    while todo:
        below = _task_children(todo.pop())
        if below is None:
            return _descendants_from_every_stat(pid)
        found += below
        todo += below
    return found


def _descendants_from_every_stat(pid: int) -> list[int]:
    parents = children_by_parent()
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class OwnProcess:
    """A process of ours, taken by id while the id is known to be its: signals reach that
    process or nothing, never a process that was given the id after it ended."""

    def __init__(self, pid: int):
        self.pid = pid
        self.started = start_time(pid)
        self._fd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self._fd = os.pidfd_open(pid)
            except OSError:  # gone already (or a kernel without pidfds): the start time decides
                pass

    def exists(self) -> bool:
        """Whether the id still names this process (running, or exited and not yet reaped)."""
        if self._fd is not None:
            try:
                signal.pidfd_send_signal(self._fd, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        if os.name == "nt":
            return _windows_pid_alive(self.pid)
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return self.started is None or start_time(self.pid) in (None, self.started)

    def alive(self) -> bool:
        """Whether this process still runs (a zombie has ended)."""
        return self.exists() and _state(self.pid) not in ("Z", "X")

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to this process if it still exists; return whether it was sent."""
        try:
            if self._fd is not None:
                signal.pidfd_send_signal(self._fd, sig)
            elif self.exists():
                os.kill(self.pid, sig)
            else:
                return False
        except OSError:
            return False
        return True

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process group this process leads (what it started, even after
        it ended itself), unless the group's id has been given to another process.

        Linux gives out an id again only once no process uses it, as a process id or as a
        group's: while one member of the group lives, the id is the group's. So when another
        process holds the id now, the group is empty and that process is not ours."""
        if not hasattr(os, "killpg"):
            return
        if not self.exists() and _stat_fields(self.pid) is not None:
            return  # the id names a process that is not ours: our group has no member left
        try:
            os.killpg(self.pid, sig)
        except OSError:
            pass

    def descendants(self) -> list[OwnProcess]:
        """Every living process below this one (see :func:`descendants`), each as an
        OwnProcess; [] once this process is gone (its id may lead to another's children)."""
        if not self.exists():
            return []
        below = [OwnProcess(pid) for pid in descendants(self.pid)]
        return below if self.exists() else []

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
