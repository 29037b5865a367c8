"""The processes of one launch: start the ranks, hear from each, print rank 0's output as it
comes (a progress bar as one line updated in place), stop whatever is left (each rank's own
process group too) and read what they wrote.

``ddp_lib.launch.run_job`` drives a :class:`Job`; this module knows nothing of stores or
environments, only of processes, pipes and output files.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import time
from multiprocessing.connection import wait

from ddp_lib import _child
from ddp_lib.errors import is_peer_failure

STOP_GRACE_S = 3.0  # between SIGTERM and SIGKILL when stopping ranks
EXIT_GRACE_S = 10.0  # a rank that has returned gets this long to exit before it is stopped
FAILURE_GRACE_S = 2.0  # to hear from other ranks after the first failure
QUIET_NOTICE_S = 5.0  # with no rank at the rendezvous store after this long, say so (once)
STACK_DUMP_WAIT_S = 0.5  # for ranks still running at the deadline to write their stacks
OUTPUT_POLL_S = 0.1  # how often rank 0's new output is printed (and its progress bar redrawn) while the job runs


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one owned by another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _context(start_method: str):
    return multiprocessing.get_context(start_method)


_PREFIX = "[rank 0] "


class _LiveStream:
    """One of rank 0's output files, printed to ``target`` (this process's stdout or stderr) as it grows."""

    def __init__(self, path: str, target):
        self.path = path
        self.target = target
        self.offset = 0  # bytes of the file printed as whole lines
        self.status = ""  # the unfinished line being redrawn (a progress bar), as on screen now
        self.limit: int | None = None  # bytes past this are not shown (stacks written at the deadline)

    def take(self, final: bool) -> tuple[list[str], str]:
        """The lines finished since the last call (each in its last state), and the unfinished
        line if it is being redrawn ("" if none). ``final``: an unfinished line counts as finished."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return [], ""
        if self.limit is not None:
            data = data[:max(0, self.limit - self.offset)]
        cut = len(data) if final else data.rfind(b"\n") + 1
        self.offset += cut
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

    def poll(self, final: bool = False) -> None:
        """Print what rank 0 wrote since the last poll. ``final``: the job is over, so an
        unfinished last line is printed as a line."""
        for stream in self.streams:
            lines, status = stream.take(final)
            if lines or status != stream.status:
                self._show(stream, lines, status)

    def stop_stderr_at(self, limit: int | None) -> None:
        """Show none of rank 0's stderr past byte ``limit`` (where stacks written at the deadline begin)."""
        if len(self.streams) > 1:
            self.streams[1].limit = limit

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


class Job:
    """The processes of one launch and what has been heard from them."""

    def __init__(self, specs: list[_child.RankSpec], start_method: str, live: LiveOutput | None,
                 store: object | None):
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
            # The rest of rank 0's output, up to any stacks written at the deadline (they go in the error).
            self.live.stop_stderr_at(self.stack_starts.get(0))
            self.live.poll(final=True)

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


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


def _last_state(line: str) -> str | None:
    """A line as a terminal leaves it: of a line redrawn with carriage returns (a progress bar),
    its last non-blank state; None if it was wiped (spaces over it, as a bar that clears itself)."""
    if "\r" not in line:
        return line
    states = [state for state in line.split("\r") if state.strip()]
    return states[-1] if states else None


def _text(data: bytes) -> str:
    """A rank's output as it would stay on screen: each line redrawn with carriage returns in its
    last state (a progress bar's hundreds of updates are one line), wiped lines left out."""
    text = _decode(data)
    if "\r" not in text:
        return text
    *lines, rest = text.split("\n")
    kept = "".join(f"{line}\n" for line in map(_last_state, lines) if line is not None)
    return kept + (_last_state(rest) or "")


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
