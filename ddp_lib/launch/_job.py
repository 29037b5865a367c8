"""The ranks of one launch: start them, hear from each, stop whatever is left (each rank's own
process group too).

``ddp_lib.launch.run_job`` drives a :class:`Job`; this module knows nothing of stores (it only
holds ``store`` so that it lives as long as the job) or environments, only of ranks, their folders
and their pipes. Each rank has a folder (:class:`ddp_lib.launch._output.RankOutput`) where it leaves
its record as a torchrun rank leaves its own (``rank.json``, ``result.json`` or ``error.json``,
``stdout.log``, ``stderr.log``, stacks when asked), and a Job reads it with the reader of torchrun's
rank folders (:func:`ddp_lib.launch._record.read_rank`). A rank's pipe carries no record: the
launcher waits on the pipes and the ranks' process sentinels (``multiprocessing.connection.wait``),
and a pipe wakes it when its rank has written its record (an empty message) or has ended (end of
file). A Job polls the live view of rank 0 while it waits and reads every rank's output files when
it is done.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path

from ddp_lib.errors import Failure, LaunchStartError, blamed_rank
from ddp_lib.launch import _child, _stacks
from ddp_lib.launch._forkserver import _forkserver_running, start_deaf_to_ctrl_c
from ddp_lib.launch._output import LiveOutput
from ddp_lib.launch._processes import OwnProcess, children, ctrl_c_held, parent
from ddp_lib.launch._record import read_output, read_rank, stack_files

STOP_GRACE_S = 3.0  # between SIGTERM and SIGKILL when stopping ranks
KILLED_WAIT_S = 10.0  # for a rank to end after SIGKILL (one in uninterruptible sleep may not)
EXIT_GRACE_S = 10.0  # a rank that has returned gets this long to exit before it is stopped
FAILURE_GRACE_S = 2.0  # to hear from other ranks after the first failure
OUTPUT_POLL_S = 0.1  # how often rank 0's new output is printed (and its progress bar redrawn) while the job runs
BELOW_POLL_S = 0.1  # how often the processes below each rank are noted while the job runs


@contextlib.contextmanager
def _main_file_hidden_unless_real():
    """Without a real file behind ``__main__.__file__`` (a driver read from standard input,
    ``python - <<EOF``, has "<stdin>"), hide it while the ranks start: multiprocessing would
    have each child run that "file" again and fail, as it does not for a notebook, which has none."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _context(start_method: str):
    return multiprocessing.get_context(start_method)


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
        # Each rank as a process, not an id: under forkserver a rank that ends is reaped at once
        # and its id may go to another job's process, which no signal of ours may reach.
        self.own: list[OwnProcess] = []
        self.conns: dict = {}  # reading end of each rank's wake-up pipe, until heard from
        self.results: dict[int, object] = {}
        self.failures: dict[int, Failure] = {}
        self.exit_codes: dict[int, int | None] = {}  # rank -> exit code, for a rank that ended without a record
        # Ranks whose process sentinel reported an end while the rank still runs: a killed
        # forkserver reports every child it started as ended (exit code 255). They are watched
        # through their pipes alone, so the deadline still holds.
        self.sentinel_lost: set[int] = set()
        self.running: list[int] = []
        self.stacks: dict[int, str] = {}  # rank -> its Python stack at the deadline, as text
        self.stack_frames: dict[int, list] = {}  # rank -> the same, as the rank wrote it (data)
        self.lifeline = None  # write end; closing it (or dying) ends every rank still alive
        self.stopped = False
        self.below: dict[int, OwnProcess] = {}  # every living process seen below a rank, by id

    def start(self) -> None:
        if self.ctx.get_start_method() == "forkserver":
            start_deaf_to_ctrl_c()
        with _main_file_hidden_unless_real():
            self._start()

    def _start(self) -> None:
        lifeline, self.lifeline = self.ctx.Pipe(duplex=False)
        inherited = self.lifeline.fileno() if self.ctx.get_start_method() == "fork" else None
        for spec in self.specs:
            spec.output.make_folder()
            reader, writer = self.ctx.Pipe(duplex=False)
            proc = self.ctx.Process(target=_child.run_rank, name=f"ddp_lib-rank{spec.rank}", daemon=False,
                                    args=(spec, writer, lifeline, inherited))
            self.procs.append(proc)
            self.conns[spec.rank] = reader
            try:
                proc.start()
            except (EOFError, OSError) as exc:
                if self.ctx.get_start_method() == "forkserver" and not _forkserver_running():
                    raise LaunchStartError(
                        f"the forkserver (the process that starts each rank) ended while rank {spec.rank} was "
                        f"starting ({type(exc).__name__}); the ranks started were stopped, and the next launch "
                        "starts a new forkserver") from None
                raise
            self.pids.append(proc.pid)
            self.own.append(OwnProcess(proc.pid))
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
            self.dump_stacks(self.running)

    def _wait_until(self, deadline: float | None, stop_at_failure: bool) -> None:
        while self.conns and not (stop_at_failure and self.failures):
            now = time.monotonic()
            remaining = None if deadline is None else deadline - now
            if remaining is not None and remaining <= 0:
                if stop_at_failure:
                    self.running = sorted(self.conns)
                return
            pause = [t for t in (remaining, OUTPUT_POLL_S if self.live else None, BELOW_POLL_S) if t is not None]
            for rank in self.wait_any(self.conns, min(pause) if pause else None):
                if rank in self.conns:
                    self._receive(rank)
            self._note_below()
            if self.live:
                self.live.poll()

    def _note_below(self) -> None:
        """Note every child of a rank not yet heard from. One that a rank started in a session of
        its own (``start_new_session=True``) is re-parented to init when the rank is killed from
        outside (SIGKILL, an out-of-memory kill, a crash in C++), and no longer below it; noted
        before, it is stopped with the job, and the process group it leads with it. Only children:
        a process started by double fork (a daemon) has left the rank on purpose, and one started
        and orphaned between two polls is missed."""
        for pid in [pid for pid, process in self.below.items() if not process.alive()]:
            self.below.pop(pid).close()
        for rank in list(self.conns):
            own = self.own[rank] if rank < len(self.own) else None
            if own is None or not own.exists():  # its id may now be another's, with another's children
                continue
            for pid in children(own.pid):
                if pid in self.below:
                    continue
                process = OwnProcess(pid)
                # Taken after it was listed: a short-lived child may have ended meanwhile and its id
                # gone to another's process. Kept only if what it names now is still the rank's child.
                if process.exists() and parent(pid) == own.pid:
                    self.below[pid] = process
                else:
                    process.close()

    def wait_any(self, conns: dict, timeout: float | None) -> list[int]:
        """Wait up to ``timeout`` for one of ``conns`` (``{rank: connection}``) to be readable or its
        rank's process to end; the ranks to look at (each then read, or :meth:`ended` asked). A rank
        is watched through its pipe and, unless it was lost (``sentinel_lost``), its process sentinel."""
        watched = {}
        for rank, conn in conns.items():
            watched[conn] = rank
            if rank not in self.sentinel_lost:
                watched[self.procs[rank].sentinel] = rank
        return sorted({watched[ready] for ready in wait(list(watched), timeout)})

    def ended(self, rank: int) -> bool:
        """Whether ``rank``'s process has ended (its exit code is then in ``exit_codes``). A sentinel
        that reports an end while the rank still runs is not believed: its forkserver died, and the
        rank goes into ``sentinel_lost``."""
        proc = self.procs[rank]
        if proc.is_alive():
            return False
        if self.own[rank].alive():
            self.sentinel_lost.add(rank)
            return False
        proc.join(1)
        self.exit_codes[rank] = proc.exitcode
        return True

    def dump_stacks(self, ranks: list[int]) -> None:
        """Ask ``ranks`` (still running) for their Python stacks, which each writes as data
        (:mod:`ddp_lib.launch._stacks`), into ``stack_frames`` and, as text, ``stacks``, to name where
        each was in the timeout error. A rank that has not started has none."""
        asked = {rank: stack_files(Path(self.specs[rank].output.folder))
                 for rank in ranks if self.specs[rank].output.started()}
        for rank, threads in _stacks.ask(asked).items():
            self.stack_frames[rank] = threads
            self.stacks[rank] = _stacks.as_text(threads)

    def first_failure(self) -> int:
        """The rank to blame: the lowest one that failed on its own, rather than because a
        peer's failure broke a collective (a closed or reset connection, torch's Dist*Error)."""
        return blamed_rank(self.failures)

    def _receive(self, rank: int) -> None:
        """Read ``rank``'s record from its folder once its pipe says it is written (an empty
        message) or the rank has ended (end of file, or its sentinel); never block on the pipe."""
        conn = self.conns[rank]
        woken = False  # the rank said it had written its record (it tried to, at least)
        try:
            if conn.poll():
                conn.recv_bytes()  # the rank's word that its record is written; it carries nothing
                woken = True
            elif not self.ended(rank):
                return
        except (EOFError, OSError):  # ended: it closed its end of the pipe
            pass
        del self.conns[rank]
        conn.close()
        spec = self.specs[rank]
        record = read_rank(spec.output.folder, output=False)  # the reader of torchrun's rank folders
        if record.finished:
            self.results[rank] = record.result
        elif record.failure is not None:  # what it raised, or a result that cannot be unpickled here
            self.failures[rank] = record.failure
        else:  # it wrote nothing: how it ended says what happened
            proc = self.procs[rank]
            proc.join(1)
            self.exit_codes[rank] = proc.exitcode
            if proc.exitcode == 0 and spec.exit_like_torch:
                self.results[rank] = None  # sys.exit(0) or os._exit(0): finished, as under torch
            elif woken:  # it wrote its record, but nothing of it is there: its folder had no room
                self.failures[rank] = Failure("", f"{exit_text(proc.exitcode)}, and its record (its result or its "
                                              f"error) could not be written to {spec.output.folder}: make room "
                                              "there, or set TMPDIR to a folder with room")
            else:
                self.failures[rank] = Failure("", _describe_exit(proc.exitcode, spec.output.started()))

    def _join_finished(self) -> None:
        end = time.monotonic() + EXIT_GRACE_S
        for proc in self.procs:
            proc.join(max(0.0, end - time.monotonic()))

    def _signal_groups(self, sig: int) -> None:
        # Each rank leads its own process group: this reaches whatever the worker started too,
        # whether the rank itself is still alive or not.
        for own in self.own:
            own.signal_group(sig)

    def _signal_rank(self, rank: int, sig: int) -> None:
        if os.name == "nt":  # no signals there: multiprocessing ends it through its process handle
            self.procs[rank].terminate()
        else:
            self.own[rank].signal(sig)

    def stop(self) -> None:
        """Stop every rank still alive, and every process a rank started: SIGTERM, then
        SIGKILL after a grace period. Signals go to these processes only (OwnProcess), never
        to a process that was given the id of one that has ended. Ctrl-C pressed meanwhile
        raises KeyboardInterrupt once they are stopped, not before."""
        if self.stopped:
            return
        with ctrl_c_held():
            try:
                self._stop_ranks()
            finally:
                # Whatever happened above, a rank still running sees its lifeline close and ends
                # itself (its watchdog): nothing outlives the launcher.
                for own in self.own:
                    own.close()
                for conn in self.conns.values():
                    conn.close()
                if self.lifeline is not None:
                    self.lifeline.close()
                if self.live:  # the rest of rank 0's output; its files are closed
                    self.live.poll(final=True)
            self.stopped = True

    def _stop_ranks(self) -> None:
        # A start cut short by Ctrl-C may have started a rank without taking its OwnProcess.
        for proc in self.procs[len(self.own):]:
            if proc.pid is None:
                break  # never started, or started without us learning its id: its lifeline ends it
            own = OwnProcess(proc.pid)
            if not proc.is_alive():  # ended already: the id, taken only now, may be another's
                own.close()
                break
            self.own.append(own)
        started = range(len(self.own))
        alive = [rank for rank in started if self.procs[rank].is_alive()]
        # Found before the ranks die: a process a rank started in a session of its own is no
        # longer below it afterwards (its process group, signalled below, does not hold it).
        # A rank that has sent its result may still be on its way out, before it stops what it started.
        # The ranks are not frozen (SIGSTOP) for the search: a launcher killed while they were
        # frozen (Jupyter's restart sends SIGINT, then SIGKILL at once) would leave them stopped
        # for good, their watchdogs unable to run.
        below = [p for rank in alive for p in self.own[rank].descendants()] + list(self.below.values())
        for rank in alive:
            self._signal_rank(rank, signal.SIGTERM)
        self._signal_groups(signal.SIGTERM)
        end = time.monotonic() + STOP_GRACE_S
        for rank in alive:
            self.procs[rank].join(max(0.0, end - time.monotonic()))
        for rank in alive:
            if self.procs[rank].is_alive():
                self._signal_rank(rank, signal.SIGKILL)
        end = time.monotonic() + KILLED_WAIT_S
        for rank in alive:
            self.procs[rank].join(max(0.0, end - time.monotonic()))
        self._signal_groups(signal.SIGKILL)
        for process in self.below.values():
            process.signal_group(signal.SIGKILL)  # what a noted child started in its own session
        for process in below:
            process.signal(signal.SIGKILL)
            process.close()
        for proc in self.procs:
            if not proc.is_alive():  # one that outlived SIGKILL cannot be closed; there is nothing more to do
                proc.close()

    def read_outputs(self) -> dict[int, tuple[str, str]]:
        """Every rank's (stdout, stderr) from its folder, as they stay on screen (the reader of
        torchrun's rank folders). The stacks asked for at the deadline are in their own file
        (dump_stacks), not the rank's stderr."""
        return {s.rank: read_output(s.output.folder) for s in self.specs}


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; a real-time signal (34 and up on Linux) has no name: as torch writes it."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"<Unknown signal {number}>"


def exit_text(exitcode: int | None) -> str:
    """How a process ended: "exited with code 3", "was killed by SIGKILL"."""
    if exitcode is not None and exitcode < 0:
        return f"was killed by {signal_name(-exitcode)}"
    return f"exited with code {exitcode}"


def _describe_exit(exitcode: int | None, started: bool = True) -> str:
    if exitcode is not None and exitcode < 0:
        return f"{exit_text(exitcode)} before returning a result"
    if not started:
        # Under spawn and forkserver a child imports the main script first: a script that
        # launches at import makes each child try to launch too, which multiprocessing refuses.
        return (f"exited with code {exitcode} while starting, before the worker ran (its error went to this "
                "process's stderr); if a script launches the ranks, put the launch under "
                '`if __name__ == "__main__":`, since each rank imports the main script')
    return f"{exit_text(exitcode)} before returning a result"
