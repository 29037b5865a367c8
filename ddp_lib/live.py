"""Ranks that stay up between cells: run code on every rank, look at each rank, run the next line.

    %load_ext ddp_lib.live
    %ranks 4                 # start 4 ranks; `rank` and `world_size` are defined on each
    %%ranks                  # this cell runs on every rank (%%ranks 0,2: on those ranks only)
    ...
    ranks.get("loss")        # each rank's value of an expression, in rank order
    %ranks stop

``ranks`` is this module's :data:`ranks`, put in the notebook by ``%load_ext`` (``from ddp_lib.live
import ranks`` says where it comes from).

Underneath, for scripts and tests::

    ranks = LiveRanks()
    ranks.start(4)
    ranks.run("x = rank * 2\\nx")   # {0: '0', 1: '2', ...}: the last expression's value on each rank
    ranks.get("x")                  # [0, 2, 4, 6]
    ranks.stop()

Each rank is started by the launcher's machinery (:mod:`ddp_lib.launch._job`, :mod:`ddp_lib.launch._child`) and
runs :func:`ddp_lib._live_rank.serve`. Its output goes to its own files; this process prints rank
0's as it comes and the others' when the cell ends, labelled and in rank order, so a notebook's
stored output is the same on every run. Nothing is left running: a rank ends when this process
ends, however it ends.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import multiprocessing
import os
import pickle
import re
import signal
import sys
import time

from ddp_lib.errors import Failure, WorkerError, first_line, stopped_at
from ddp_lib.forkserver import register_at_kernel_shutdown, unregister_at_kernel_shutdown
from ddp_lib.launch._child import RankSpec
from ddp_lib.launch._job import FAILURE_GRACE_S, OUTPUT_POLL_S, Job, exit_text
from ddp_lib.launch._output import (
    GrowingFile,
    LiveOutput,
    RankOutput,
    output_dir,
    output_text,
    print_other_ranks,
    sweep_orphaned_logdirs,
)
from ddp_lib.launch._processes import stop_to_the_end
from ddp_lib.ports import taken_port_hint

# A cell still running after this is stopped, with where each rank was. Below the 60 s that ranks
# started with --init give a collective (ddp_lib.process_group.COLLECTIVE_TIMEOUT): a cell stuck in
# one of their collectives always ends at its own deadline first, never at gloo's timeout.
CELL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 120.0  # a kernel's first start waits for the forkserver to import torch
INTERRUPT_GRACE_S = 2.0  # for the ranks to leave a cell after the stop button


class RanksError(RuntimeError):
    """A refusal (start twice, stop twice, run before starting, a rank that is not there) or a rank
    that died. One line, shown in a notebook without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class RankCellError(WorkerError):
    """A rank raised in a cell. The message names the rank and the learner's line; the rank's
    traceback, from the learner's cell on, is shown above it (in a notebook, in place of the kernel's
    own frames; elsewhere, as the error's cause)."""

    def _render_traceback_(self) -> list[str]:
        return [*self.worker_traceback.rstrip().splitlines(), f"{type(self).__name__}: {self}"]


class RanksTimeout(TimeoutError):
    """A cell passed its deadline; every rank was stopped. ``where`` maps each rank still running
    to the learner's line it was at, ``stacks`` to its whole Python stack."""

    def __init__(self, message: str, where: dict[int, str], stacks: dict[int, str]):
        super().__init__(message)
        self.where = where
        self.stacks = stacks

    def _render_traceback_(self) -> list[str]:
        return [*(f"rank {rank} was at {text}" for rank, text in sorted(self.where.items())),
                f"{type(self).__name__}: {self}"]


class RanksInterrupted(KeyboardInterrupt):
    """The stop button (Ctrl-C) interrupted a cell on every rank it ran on."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class RankValues(dict):
    """Each rank's last expression value, as text (``{rank: repr}``), shown one rank after another."""

    def __repr__(self) -> str:
        shown = []
        for rank, text in sorted(self.items()):
            label = f"[rank {rank}] "
            first, *rest = text.splitlines() or [""]
            shown.append(label + first + "".join(f"\n{' ' * len(label)}{line}" for line in rest))
        return "\n".join(shown)

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython: this text, not a dict's
        printer.text(repr(self))


def _failed(replies: dict[int, tuple]) -> bool:
    return any(reply[0] == "error" for reply in replies.values())


def _defines_code(source: str) -> bool:
    """Whether a cell defines a function or a class, whose lines a rank may be in during a later cell."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
               for node in ast.walk(tree))


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


class LiveRanks:
    """``world_size`` processes that keep their variables between the cells they run."""

    def __init__(self, timeout: float = CELL_TIMEOUT_S):
        self.timeout = timeout
        self.world_size = 0  # 0 while no ranks run
        self._restart = ""  # the %ranks line that started the running ranks
        self._job: Job | None = None
        self._conns: list = []
        self._files: contextlib.ExitStack | None = None
        self._live: LiveOutput | None = None
        self._others: dict[int, tuple[GrowingFile, GrowingFile]] = {}
        self.cells = 0  # cells run since the ranks started: an unnamed cell is called "cell N" after it
        # The lines of the running cell and of each cell that defines a function or class (a rank
        # may be inside one later), by name: to quote the line where a rank was.
        self._sources: dict[str, list[str]] = {}
        self._number = 0  # of the last command sent; each answer carries its command's number

    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self, world_size: int, *, init: bool = False, backend: str | None = None) -> None:
        """Start ``world_size`` ranks, each with ``rank`` and ``world_size`` defined. ``init``: each
        also joins the default process group (``backend``, by default gloo on CPU and nccl where
        every rank has a GPU) and gets ``device``. Raises RanksError if ranks run already,
        LaunchInputError for a world size or backend this machine cannot run."""
        # Imported here: they import torch, which a kernel that only loads the extension need not.
        from ddp_lib import launch
        from ddp_lib.launch._checks import check_start_method, check_world_size, launch_backend
        from ddp_lib.process_group import free_port

        if self.running:
            raise RanksError(f"{self.world_size} ranks are running already: stop them first (%ranks stop)")
        world_size = check_world_size(world_size)
        backend = launch_backend(backend or None, world_size)
        sweep_orphaned_logdirs()
        self._files = contextlib.ExitStack()
        logdir = self._files.enter_context(output_dir())
        # MASTER_ADDR/MASTER_PORT set, so that init_process_group() with nothing else works; a
        # tutorial's setup() that sets its own (12355) works too: its rank 0 hosts the store.
        envs = launch.rank_environments(world_size, backend, [{"MASTER_ADDR": "127.0.0.1",
                                                               "MASTER_PORT": str(free_port())}] * world_size, None)
        start_method = check_start_method(None)
        ctx = multiprocessing.get_context(start_method)
        pipes = [ctx.Pipe(duplex=True) for _ in range(world_size)]
        specs = [RankSpec(rank=r, world_size=world_size, fn_ref="ddp_lib._live_rank:serve",
                          args_blob=pickle.dumps(((), {})), pass_world_size=True, env=envs[r],
                          output=RankOutput(logdir, r), sys_path=list(sys.path), cwd=os.getcwd(), store_env=None,
                          commands=pipes[r][1])
                 for r in range(world_size)]
        self._job = Job(specs, start_method, None, None)
        self.cells = 0
        self._number = 0  # the ranks' first word ("ready") carries 0
        self._sources = {}
        self._conns = [ours for ours, _ in pipes]
        self.world_size = world_size
        self._restart = f"%ranks {world_size}" + (" --init" if init else "")  # what a hint says to run again
        self._live = LiveOutput(specs[0].output.stdout_path, specs[0].output.stderr_path)
        self._others = {s.rank: (GrowingFile(s.output.stdout_path), GrowingFile(s.output.stderr_path))
                        for s in specs[1:]}
        atexit.register(self._stop_quietly)
        register_at_kernel_shutdown(self._stop_quietly)  # a kernel's shutdown waits for the ranks' end
        try:
            self._job.start()
            for _, theirs in pipes:
                theirs.close()  # theirs alone: a rank that dies is then seen at once (end of file)
            self._ask(list(range(world_size)), None, START_TIMEOUT_S, what="start")
            if init:
                self.run("from ddp_lib.process_group import setup as _setup\n"
                         f"device = _setup(rank, world_size, backend={backend!r})\ndel _setup", name="init")
                self.cells = 0  # the learner's first cell is cell 1
        except BaseException:
            self._stop_quietly()
            raise

    def run(self, source: str, ranks: list[int] | None = None, *, timeout: float | None = None,
            name: str | None = None) -> RankValues | None:
        """Run ``source`` on ``ranks`` (default: all); return each rank's last expression value as
        text, or None when no rank has one. ``name``: what errors call the cell (default "cell N")."""
        targets = self._targets(ranks)
        self.cells += 1
        name = name or f"cell {self.cells}"
        self._sources[name] = source.splitlines()
        try:
            replies = self._ask(targets, ("cell", source, name), self.timeout if timeout is None else timeout,
                                what="cell")
        finally:
            if not _defines_code(source):
                self._sources.pop(name, None)
        values = RankValues({r: reply[1] for r, reply in replies.items() if reply[1] is not None})
        return values or None

    def get(self, expression: str, ranks: list[int] | None = None) -> list:
        """The value of ``expression`` on each of ``ranks`` (default: all), in rank order; a tensor
        comes back detached, on the CPU."""
        targets = self._targets(ranks)
        self._sources["ranks.get"] = [expression]  # quoted by a message, as a cell's line is
        replies = self._ask(targets, ("get", expression), self.timeout, what="get")
        return [replies[r][1] for r in targets]

    def stop(self) -> None:
        """Stop every rank (their variables are gone). Raises RanksError if none runs."""
        if not self.running:
            raise RanksError("no ranks are running: there is nothing to stop")
        self._stop_quietly()

    def _stop_quietly(self) -> None:
        atexit.unregister(self._stop_quietly)
        unregister_at_kernel_shutdown(self._stop_quietly)
        job, self._job = self._job, None
        if job is None:
            return
        try:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.send_bytes(pickle.dumps((self._number + 1, "exit")))  # a rank not in a cell leaves at once
            stop_to_the_end(job.stop)
        finally:
            for conn in self._conns:
                conn.close()
            for files in self._others.values():
                for file in files:
                    file.close()
            if self._live is not None:
                self._live.poll(final=True)
            if self._files is not None:
                self._files.close()
            self._conns, self._others, self._live, self._files = [], {}, None, None
            self.world_size = 0

    def _targets(self, ranks: list[int] | None) -> list[int]:
        if not self.running:
            raise RanksError("no ranks are running: start them first (%ranks 4 starts 4)")
        if ranks is None:
            return list(range(self.world_size))
        wrong = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size]
        if wrong or not ranks:
            raise RanksError(f"ranks must be among 0 to {self.world_size - 1}, got {list(ranks)!r}")
        return sorted(set(ranks))

    def _ask(self, targets: list[int], message: tuple | None, timeout: float, what: str) -> dict[int, tuple]:
        """Send ``message`` to ``targets`` (None: only wait for their first word), wait for their
        replies and show their output; raise as the launcher would if one fails, hangs or dies.
        Every reply to the message is read before anything is raised."""
        if message is not None:
            self._number += 1
            blob = pickle.dumps((self._number, *message))
            for rank in targets:
                with contextlib.suppress(OSError):  # a rank that died since the last cell: found below
                    self._conns[rank].send_bytes(blob)
        replies: dict[int, tuple] = {}
        dead: dict[int, int | None] = {}
        interrupted: list[int] = []  # still running FAILURE_GRACE_S after another rank failed
        try:
            self._collect(targets, replies, dead, time.monotonic() + timeout, stop_at_failure=True)
            if _failed(replies) and not dead:
                # Often the others fail at the same moment (a peer's collective breaks): hear them.
                self._collect(targets, replies, dead, time.monotonic() + FAILURE_GRACE_S)
                interrupted = [r for r in targets if r not in replies and r not in dead]
                if interrupted and not dead:  # busy, or waiting for the failed rank: as the stop button
                    self._interrupt_ranks(interrupted, targets, replies, dead)
        except KeyboardInterrupt:
            self._interrupt(targets, replies, dead)
        pending = [r for r in targets if r not in replies and r not in dead]
        if pending:
            self._job.dump_stacks(pending)
        self._show_output()
        failures = {r: reply[1:] for r, reply in replies.items()
                    if reply[0] == "error" and not (r in interrupted and reply[1] == "KeyboardInterrupt")}
        if dead or pending:
            stacks, frames = dict(self._job.stacks), dict(self._job.stack_frames)
            restart = self._restart
            self._stop_quietly()
            lost = f"every rank was stopped, so no variable survives: start them again ({restart})"
            if dead:
                rank = min(dead)
                raise RanksError(f"rank {rank} {exit_text(dead[rank])} during the {what}; {lost}")
            where = {r: self._where(frames.get(r, [])) for r in pending}
            if failures:
                raise self._cell_error(failures, f"; {_ranks_text(pending)} still ran {FAILURE_GRACE_S:g} s "
                                                 f"later and did not leave the cell when interrupted (waiting in "
                                                 f"a collective, most likely); {lost}")
            raise RanksTimeout(f"the {what} did not finish within {timeout:g} s on {_ranks_text(pending)}; {lost}",
                               where, stacks)
        if failures:
            left = [r for r in interrupted if r in replies]
            state = (f"; {_ranks_text(left)} still ran {FAILURE_GRACE_S:g} s later and "
                     f"{'was' if len(left) == 1 else 'were'} interrupted" if left else "")
            raise self._cell_error(failures, state + "; every rank keeps its variables")
        return replies

    def _collect(self, targets: list[int], replies: dict, dead: dict, deadline: float,
                 stop_at_failure: bool = False) -> None:
        """Fill ``replies`` ({rank: message}) and ``dead`` ({rank: exit code}) until every target has
        answered, one has died, the deadline passes, or (``stop_at_failure``) one has failed. The
        launcher's :meth:`Job.wait_any` and :meth:`Job.ended` watch the ranks (a dead forkserver is
        not taken for dead ranks)."""
        while True:
            pending = [r for r in targets if r not in replies]
            now = time.monotonic()
            if not pending or dead or now >= deadline or (stop_at_failure and _failed(replies)):
                return
            for rank in self._job.wait_any({r: self._conns[r] for r in pending}, min(deadline - now, OUTPUT_POLL_S)):
                conn = self._conns[rank]
                try:
                    if conn.poll():
                        reply = self._reply(conn.recv_bytes())
                        if reply is not None:
                            replies[rank] = reply
                        continue
                except (EOFError, OSError):  # the rank has closed its end: it has ended
                    self._job.procs[rank].join(1)
                    dead[rank] = self._job.procs[rank].exitcode
                    continue
                if self._job.ended(rank):
                    dead[rank] = self._job.exit_codes[rank]
            self._live.poll()

    def _reply(self, blob: bytes) -> tuple | None:
        """A rank's answer to the last command (None: an answer to an earlier one); a value that
        cannot be unpickled here is that rank's error, not this process's."""
        number, *reply = pickle.loads(blob)  # plain data: a value asked for is pickled on its own inside
        if number != self._number:
            return None
        if reply[0] == "value":
            try:
                return ("value", pickle.loads(reply[1]))
            except Exception as exc:
                return ("error", type(exc).__qualname__, "its value cannot be unpickled in the notebook: "
                        + first_line(str(exc), type(exc).__qualname__), "", "")
        return tuple(reply)

    def _interrupt_ranks(self, ranks: list[int], targets: list[int], replies: dict, dead: dict) -> list[int]:
        """Interrupt ``ranks`` (SIGINT, as the stop button) and give them INTERRUPT_GRACE_S to leave
        the cell; the ranks that did not (a rank inside a gloo collective cannot)."""
        for rank in ranks:
            self._job.own[rank].signal(signal.SIGINT)
        with contextlib.suppress(KeyboardInterrupt):  # a press meanwhile: the same answer
            self._collect(targets, replies, dead, time.monotonic() + INTERRUPT_GRACE_S)
        return [r for r in ranks if r not in replies and r not in dead]

    def _interrupt(self, targets: list[int], replies: dict, dead: dict) -> None:
        """The stop button: interrupt every rank still in the cell; raise RanksInterrupted once they
        have left it, or once every rank is stopped if one has not (a rank inside a collective
        whose peers have left it cannot)."""
        stuck = self._interrupt_ranks([r for r in targets if r not in replies and r not in dead],
                                      targets, replies, dead)
        if stuck:
            self._job.dump_stacks(stuck)  # before the output is shown: the stacks go in the error
        self._show_output()
        if not stuck and not dead:
            raise RanksInterrupted(f"interrupted: {_ranks_text(targets)} left the cell; every rank keeps its variables")
        restart = self._restart
        where = "; ".join(f"rank {r} at {self._where(self._job.stack_frames.get(r, []))}" for r in stuck)
        self._stop_quietly()
        if dead:
            rank = min(dead)
            raise RanksInterrupted(f"interrupted: rank {rank} {exit_text(dead[rank])}, so every rank was stopped "
                                   f"and no variable survives: start them again ({restart})")
        raise RanksInterrupted(f"interrupted: {_ranks_text(stuck)} did not leave the cell within "
                               f"{INTERRUPT_GRACE_S:g} s ({where}), so every rank was stopped and no variable "
                               f"survives: start them again ({restart})")

    def _show_output(self) -> None:
        """Rank 0's output up to now (it was shown as it came), then the other ranks', in rank order
        (a stack asked for at a deadline is in its own file, and goes in the error)."""
        self._live.poll(final=True, keep_open=True)
        outputs = {}
        for rank, (out, err) in self._others.items():
            texts = []
            for file in (out, err):
                data = file.unread()
                file.offset += len(data)
                texts.append(output_text(data))
            outputs[rank] = tuple(texts)
        print_other_ranks(outputs, True)

    def _cell_error(self, failures: dict[int, tuple], state: str) -> RankCellError:
        """The error naming the rank to blame, its learner's line, and what state survives."""
        # Each failure as the rank reported it: type, message, traceback, where, and whether it may be a peer's echo.
        blamed = WorkerError.blaming({r: Failure(*f[:3], echo=bool(f[4:5] and f[4])) for r, f in failures.items()}, {})
        exc_type, message, tb, where, *_ = failures[blamed.rank]
        others = sorted(set(failures) - {blamed.rank})
        also = f"; {_ranks_text(others)} raised too" if others else ""
        at = f" (at {where})" if where else ""
        taken = taken_port_hint(_port_it_could_not_listen_on(message), "use a free port (lesson 00: a port "
                                "already taken)")
        error = RankCellError(blamed.rank, exc_type, first_line(blamed.message) + taken + at + also + state, tb,
                              blamed.failures)
        error.where = where
        return error

    def _where(self, stack: list) -> str:
        """The learner's line a rank was at, from its stack: "cell 5 line 2: dist.all_reduce(t), in
        all_reduce (torch/distributed/distributed_c10d.py)", then, when that line is in a function an
        earlier cell defined, the running cell's line that called it ("; called from cell 6 line 1: wait()").
        ``stack``: the rank's threads as it wrote them (errors.stopped_at)."""
        place = stopped_at(stack) if stack else None
        if place is None or not (place.line or place.call):
            return "an unknown place (no stack was written)"
        where = ", in ".join(part for part in (self._quoted(place.line), place.call) if part)
        return f"{where}; called from {self._quoted(place.outer)}" if place.outer else where

    def _quoted(self, line: str) -> str:
        """"cell 5 line 2" with that line's code, when the cell is kept."""
        cell, _, number = line.rpartition(" line ")
        lines = self._sources.get(cell, [])
        if number.isdigit() and 0 < int(number) <= len(lines) and lines[int(number) - 1].strip():
            return f"{line}: {lines[int(number) - 1].strip()}"
        return line


ranks = LiveRanks()  # the ranks a notebook's %ranks and %%ranks drive (one set per kernel)


def _port_it_could_not_listen_on(message: str) -> int | None:
    """The port in a store's "failed to listen ... port: P ... EADDRINUSE" error, else None."""
    found = re.search(r"failed to listen.*?\bport: (\d+).*?EADDRINUSE", message, re.DOTALL)
    return int(found[1]) if found else None


def load_ipython_extension(ipython) -> None:
    """``%load_ext ddp_lib.live``: the ``%ranks`` and ``%%ranks`` magics, and ``ranks`` in the notebook."""
    from ddp_lib._live_magic import register

    register(ipython)
