"""Lesson 02: looking inside ``torch.multiprocessing``: the loop that injects the rank, the
stderr of raw child processes, start-up time per start method, and why fork is fragile.

Only the lesson needs these; a training script does not.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import inspect
import io
import json
import logging
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.multiprocessing as mp

from ddp_lib.errors import last_line, short_path  # last_line: a traceback's error line
from ddp_lib.forkserver import FORKSERVER_PRELOAD
from ddp_lib.torchrun import stop_torchruns

# The lines of torch/multiprocessing/spawn.py that make fn(i, *args) happen, as in torch 2.13, in
# the order they appear there (other lines between them are shown as "...").
_LOOP_LINES = {
    "start_processes": ("def start_processes(", "fn,", "args=(),", "nprocs=1,", "join=True,", "daemon=False,",
                        'start_method="spawn",', "):", "mp = multiprocessing.get_context(start_method)",
                        "def start_process(i):", "process = mp.Process(", "target=_wrap,",
                        "args=(fn, i, args, tf.name),", "daemon=daemon,", ")", "process.start()",
                        "return i, process, tf.name", "if not start_parallel:", "for i in range(nprocs):",
                        "idx, process, tf_name = start_process(i)", "while not context.join():", "pass"),
    "_wrap": ("def _wrap(fn, i, args, error_file):", "try:", "fn(i, *args)"),
}


def _excerpt(source: str, wanted: tuple[str, ...]) -> list[str]:
    """The lines of ``source`` whose code (comments dropped) is ``wanted``, matched in order, with
    a "..." line, indented as the first line it stands for, wherever code was left out."""
    shown: list[str] = []
    found = 0
    gap = None  # the "..." line for the code left out since the last shown line
    for line in source.splitlines():
        code = line.split("  #")[0].rstrip()
        if not code.strip() or code.strip().startswith("#"):
            continue
        if found < len(wanted) and code.strip() == wanted[found]:
            shown.extend([gap, code] if gap else [code])
            found += 1
            gap = None
        elif gap is None:
            gap = code[: len(code) - len(code.lstrip())] + "..."
    if found < len(wanted):
        raise RuntimeError(f"torch {torch.__version__} changed torch/multiprocessing/spawn.py; "
                           f"line not found: {wanted[found]!r}")
    return shown + [gap] if gap else shown


def spawn_loop_source() -> str:
    """The lines of ``start_processes`` and ``_wrap`` (torch/multiprocessing/spawn.py) that call
    ``fn(i, *args)`` once per process, with their indentation; comments dropped, and each place
    where lines were left out marked ``...``."""
    module = sys.modules["torch.multiprocessing.spawn"]  # the name `spawn` there is the function
    shown = []
    for name, wanted in _LOOP_LINES.items():
        shown.append(f"# torch.multiprocessing.spawn.{name}")
        shown.extend(_excerpt(inspect.getsource(getattr(module, name)), wanted))
    return "\n".join(shown)


class Captured:
    """Text written to stderr inside a ``capture_stderr`` block (available after it ends)."""

    text: str = ""
    torch_log: list[str]  # torch's spawn log messages, without their prefix (time, PID, file)

    def __init__(self) -> None:
        self.torch_log = []

    def errors_of(self, exc_type: str) -> list[str]:
        """The distinct ``exc_type: message`` errors written here, in first-seen order. Children share
        the stderr they inherit, and two that fail at once can write the pieces of their tracebacks
        interleaved (``AttributeError :  Can't ...``): each message is read after the type's name, and
        ends at its line's end, or where the other child's pieces start on the same line (two spaces, a
        ``File "`` or a ``Traceback``)."""
        found = re.finditer(rf"{re.escape(exc_type)}[\s:]*:[\s:]*(\S.*?)(?=\s{{2,}}|\s*File \"|\s*Traceback|$)",
                            self.text, re.MULTILINE)
        return list(dict.fromkeys(f"{exc_type}: {match.group(1).strip()}" for match in found))


class _MessageRecorder(logging.Handler):
    """A logging handler that appends each record's message to a list."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def tolerate_abort_at_exit() -> Iterator[None]:
    """Let a launch end well when a rank aborted with SIGABRT as Python shut down, after its work:
    torch's rare abort at exit (docs/reliability.md). Prints one line saying so; any other failure
    is raised as it came."""
    try:
        yield
    except mp.ProcessExitedException as exc:
        if exc.signal_name != "SIGABRT":
            raise
        print(f"(rank {exc.error_index} aborted at exit, after its work: torch's rare abort, "
              "docs/reliability.md)")


@contextlib.contextmanager
def capture_stderr(torch_log: bool = False) -> Iterator[Captured]:
    """Send file descriptor 2 (inherited by child processes) and ``sys.stderr`` into a ``Captured``
    object instead of the screen. torch's "Terminating process N via signal SIGTERM" warning is
    kept off the screen, its message (no time, PID or file path) appended to ``torch_log``, or, with
    ``torch_log=True``, left to torch's own log handler: it writes to the stderr that
    existed when torch set it up, in a notebook the cell's, and is flushed as the block ends.

    A child's stderr goes wherever fd 2 of its parent points: in JupyterLab into the cell, under
    nbval to /dev/null. Capturing it makes a notebook's output the same in both.
    """
    captured = Captured()
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    old_level = spawn_log.level
    sys.stderr.flush()
    saved_fd = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp, contextlib.redirect_stderr(io.StringIO()) as py_err:
        os.dup2(tmp.fileno(), 2)
        recorder = _MessageRecorder(captured.torch_log)
        old_propagate = spawn_log.propagate
        if not torch_log:
            # its printed line carries a PID, a timestamp and torch's file path, and races: keep only the message
            spawn_log.addHandler(recorder)
            spawn_log.propagate = False
            spawn_log.setLevel(logging.WARNING)
        try:
            yield captured
        finally:
            spawn_log.removeHandler(recorder)
            spawn_log.propagate = old_propagate
            spawn_log.setLevel(old_level)
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
            tmp.seek(0)
            # Python 3.13 colours a child's traceback when the kernel's environment asks for colour.
            text = tmp.read().decode(errors="replace") + py_err.getvalue()
            captured.text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    sys.stderr.flush()  # torch's log line, if kept, before whatever the caller prints next


_TRACEBACK_FILE = re.compile(r'File "([^"]+)"')


def short_paths(traceback_text: str) -> str:
    """``traceback_text`` with each ``File "..."`` path shortened as ``ddp_lib.errors.short_path``
    does: an installed package's file from its package down (``torch/multiprocessing/spawn.py``),
    any other file by its name. The same on every machine, and shorter to read."""
    return _TRACEBACK_FILE.sub(lambda match: f'File "{short_path(match.group(1))}"', traceback_text)


def time_start_methods(fn: Callable, nprocs: int = 2,
                       repeats: dict[str, int] | None = None) -> dict[str, list[float]]:
    """Seconds for ``mp.start_processes(fn, args=(nprocs,), nprocs=nprocs, start_method=m)`` to
    start and join, for each method in ``repeats`` (default spawn once, forkserver and fork 3 times).
    forkserver is timed warm: its server, with torch preloaded, is started before timing."""
    repeats = repeats or {"spawn": 1, "forkserver": 3, "fork": 3}
    if "forkserver" in repeats:
        # As ddp_lib's launcher does; no effect if the server already runs (it then has it).
        multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)
        mp.start_processes(fn, args=(nprocs,), nprocs=nprocs, start_method="forkserver")  # warm-up, not timed
    times: dict[str, list[float]] = {}
    for method, count in repeats.items():
        if method not in multiprocessing.get_all_start_methods():
            continue
        times[method] = []
        for _ in range(count):
            start = time.perf_counter()
            mp.start_processes(fn, args=(nprocs,), nprocs=nprocs, start_method=method)
            times[method].append(time.perf_counter() - start)
    return times


def forkserver_first_and_later(nprocs: int = 2, later: int = 3) -> dict[str, list[float]]:
    """Seconds per launch of ``noop`` on ``nprocs`` processes through a forkserver, in a fresh
    Python: {"first": [s], "later": [s, ...]}. The first launch starts the server, which imports
    torch (ddp_lib's preload); later ones only fork from it."""
    out = subprocess.run([sys.executable, "-m", "ddp_lib.demos.spawning", str(nprocs), str(later)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def _time_forkserver_launches(nprocs: int, later: int) -> dict[str, list[float]]:
    from ddp_lib.workers.spawning import noop

    # As ddp_lib's launcher does: without it the server preloads no torch, and every launch imports it.
    multiprocessing.set_forkserver_preload(FORKSERVER_PRELOAD)
    seconds = []
    for _ in range(1 + later):
        start = time.perf_counter()
        mp.start_processes(noop, args=(nprocs,), nprocs=nprocs, start_method="forkserver")
        seconds.append(time.perf_counter() - start)
    return {"first": seconds[:1], "later": seconds[1:]}


def start_time_table(times: dict[str, list[float]], measured: dict[str, str] | None = None) -> str:
    """A small text table: per start method, the launches measured and their median in seconds.

    ``measured``, if given, adds a column saying what each method's launches ran (a method it
    does not name gets ``-``), for times that do not all come from the same worker. The first
    column widens for a longer row name, such as "forkserver, first start"."""
    width = max([len("start method"), *(len(method) for method in times)])
    header = f"{'start method':<{width}}  {'launches':>8}  {'median s':>8}"
    rows = [header + ("  measured on" if measured else "")]
    for method, values in times.items():
        row = f"{method:<{width}}  {len(values):>8}  {statistics.median(values):>8.3f}"
        rows.append(row + (f"  {measured.get(method, '-')}" if measured else ""))
    return "\n".join(rows)


# --- fork copies memory, not threads -------------------------------------------------------

_lock = threading.Lock()


def _hold_lock(seconds: float) -> None:
    with _lock:
        time.sleep(seconds)


def _try_lock(wait: float, answer) -> None:
    answer.put(_lock.acquire(timeout=wait))


def fork_while_lock_held(wait: float = 0.5) -> dict[str, bool]:
    """Fork while another thread holds a lock; report whether the child and, later, the parent
    could take it. The child gets the lock's memory (locked) but not the thread that would
    release it."""
    ctx = multiprocessing.get_context("fork")
    holder = threading.Thread(target=_hold_lock, args=(2 * wait,))
    holder.start()
    while not _lock.locked():
        time.sleep(0.001)
    answer = ctx.SimpleQueue()
    child = ctx.Process(target=_try_lock, args=(wait, answer))
    child.start()
    child_got_it = answer.get()
    child.join()
    holder.join()
    parent_got_it = _lock.acquire(timeout=wait)
    if parent_got_it:
        _lock.release()
    return {"child took the lock": child_got_it, "parent took the lock": parent_got_it}


# Set once fork_after_threads has computed in this process: its thread pool may exist from then on.
_parent_computed = False


def parent_has_computed() -> bool:
    """Whether ``fork_after_threads`` has computed in this process already. Its control,
    ``parent_computes=False``, is then no longer a control: the thread pool may exist."""
    return _parent_computed


def fork_hang_demo(threads: int = 2) -> list[str]:
    """Lesson 02's comparison, as lines to print: a forked child multiplies matrices on ``threads``
    threads, first from a parent that has computed nothing (the control), then from one that has
    (:func:`fork_after_threads`). The second child gets five times the control's time, at least 0.3 s,
    before it counts as hung. Once it has run in this process, the control is void: one line then
    says to restart the kernel (it sees only its own earlier runs). A control that hangs too ends the
    comparison with the same advice."""
    if parent_has_computed():
        return ["this comparison has run in this process before: restart the kernel to rerun it"]
    started = time.perf_counter()
    control = fork_after_threads(threads=threads, wait=5, parent_computes=False)
    control_seconds = time.perf_counter() - started  # fork, the child's multiply, and its exit
    if control == "hung":  # no baseline to compare the second child against
        return ["control, the parent has computed nothing:   child hung (given 5 s)",
                "the control hung too: restart the kernel, then rerun this cell"]
    wait = max(0.3, 5 * control_seconds)
    second = fork_after_threads(threads=threads, wait=wait)
    return [f"control, the parent has computed nothing:   child {control}, in {control_seconds:.2f} s",
            f"the parent has computed on {threads} threads first: child {second} (given {wait:.2f} s)",
            f"the second child hung; this process has GNU OpenMP (libgomp) loaded: {_libgomp_loaded()}"
            if second == "hung" else "the second child finished: this OpenMP runtime survived the fork"]


def _libgomp_loaded() -> bool | str:
    """Whether GNU OpenMP's library is mapped into this process, from Linux's ``/proc/self/maps``
    (torch's pip wheels for Linux bundle ``libgomp``); "unknown" where that file cannot be read."""
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return "unknown"


def _matmul() -> float:
    a = torch.ones(256, 256)
    return float((a @ a)[0, 0])


def _matmul_in_child(answer) -> None:
    _matmul()
    answer.put(torch.get_num_threads())


def _cpu_ticks(pid: int) -> int | None:
    """The user and system CPU time ``pid`` has used so far, in clock ticks, from Linux's
    ``/proc/<pid>/stat``; None where that cannot be read (another system, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the fields after the command's name
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime and stime, the stat file's 14th and 15th fields


def fork_after_threads(threads: int = 2, wait: float = 2.0, parent_computes: bool = True,
                       give_up: float = 30.0) -> str:
    """Set ``threads`` threads for torch in this process and, if ``parent_computes``, multiply two
    matrices here (that starts the thread pool), then fork a child that multiplies two matrices.
    Returns "finished on N threads" (the child's torch thread count) or "hung" (the child is then
    killed). The control, ``parent_computes=False``, is valid only in a process with no pool yet.

    A child still running after ``wait`` seconds is "hung" only if it used no CPU in the next
    0.3 s (a deadlocked child sleeps); a child that still computes, slow on a busy machine, gets
    more time, up to ``give_up`` seconds in all. Without Linux's ``/proc``, alive after ``wait``
    is "hung"."""
    global _parent_computed
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if parent_computes:
            _parent_computed = True
            _matmul()  # starts the thread pool in this process
        ctx = multiprocessing.get_context("fork")
        answer = ctx.SimpleQueue()
        started = time.monotonic()
        child = ctx.Process(target=_matmul_in_child, args=(answer,))
        child.start()
        child.join(wait)
        while child.is_alive():
            before = _cpu_ticks(child.pid)
            child.join(0.3)
            after = _cpu_ticks(child.pid)
            if child.is_alive() and (before is None or after is None or after == before
                                     or time.monotonic() - started > give_up):
                child.kill()
                child.join()
                return "hung"
        if child.exitcode != 0:
            return f"exited with code {child.exitcode}"
        used = answer.get()
        return f"finished on {used} thread{'s' if used != 1 else ''}"
    finally:
        torch.set_num_threads(old)


# --- a DDP script's exit code ------------------------------------------------------------------

# How each launcher words a rank ended by SIGABRT: mp.spawn's ProcessExitedException, and the
# failure summary of torchrun (torch.distributed.elastic.multiprocessing.errors, ProcessFailure).
SIGABRT_WORDINGS = ("terminated with signal SIGABRT", "Signal 6 (SIGABRT)")


def checksums_by_stage(printed: str) -> dict[str, list[float]]:
    """The checksums that ``ddp_basic.py``'s ``report_checksums`` printed, by stage:
    ``{"before DDP(...)": [...], "right after DDP(...)": [...], "after one step": [...]}``, from lines
    such as ``2 ranks, parameter checksum on each after one step: [1.2, 1.2]``."""
    return {line.split(" on each ")[1].split(":")[0]: ast.literal_eval(line.split(": ", 1)[1])
            for line in printed.splitlines() if " checksum on each " in line}


def exit_verdict(run: subprocess.CompletedProcess, done_line: str) -> str:
    """One line on how a DDP script run ended, from its exit code, stdout and stderr.

    ``done_line`` is text of the last line the job prints once every rank's work is done. Exit
    code 0: the job succeeded. A non-zero exit code after that line came out, with a rank ended by
    SIGABRT (in ``mp.spawn``'s words or torchrun's), is the abort at exit that torch's gloo threads
    can cause after the work (lesson 02, "Deeper: ... the rare abort at exit"). Anything else is a
    real failure, reported with the last line of its stderr."""
    if run.returncode == 0:
        return "exit code 0: the job succeeded"
    if done_line in run.stdout and any(wording in run.stderr for wording in SIGABRT_WORDINGS):
        return (f"exit code {run.returncode} after every line came out, with a rank ended by SIGABRT: "
                "torch's abort at exit, after the work, not a failure of your code")
    return (f"exit code {run.returncode}: a real failure; the last line of its error output: "
            f"{last_line(run.stderr)}")


# --- torchrun's rendezvous on one node -------------------------------------------------------

# The lines of torch/distributed/run.py's run() that choose the rendezvous, as in torch 2.13.
_TORCHRUN_RDZV_FIRST, _TORCHRUN_RDZV_LAST = "if args.standalone:", "args.master_port = 29500"


def torchrun_rendezvous_source() -> str:
    """The lines of ``torch.distributed.run.run`` from ``--standalone`` and the one-node switch to
    c10d at ``localhost:0`` to the default ``--master-port`` (comments kept: they are torch's own)."""
    import torch.distributed.run as run_module

    lines = inspect.getsource(run_module.run).splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == _TORCHRUN_RDZV_FIRST]
    ends = [i for i, line in enumerate(lines) if line.strip() == _TORCHRUN_RDZV_LAST]
    if not starts or not ends:
        raise RuntimeError(f"torch {torch.__version__} changed torch.distributed.run.run")
    shown = lines[starts[0]:ends[0] + 1]
    indent = min(len(line) - len(line.lstrip()) for line in shown if line.strip())
    return "# torch.distributed.run.run\n" + "\n".join(line[indent:] for line in shown)


def torchrun_side_by_side(script: str, jobs: int = 2, nproc_per_node: int = 2,
                          master_port: int | None = None) -> list[dict]:
    """Start ``jobs`` torchrun jobs of ``script`` at the same time on this machine (with
    ``--master-port`` if given) and wait for them. Per job: its command ("torchrun" standing for
    ``python -m torch.distributed.run``), its exit code, the last line it printed (the script's
    result), and whether its error output says EADDRINUSE. A job that fails for another reason
    raises RuntimeError with the end of its error output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc_per_node)]
    if master_port is not None:
        command += ["--master-port", str(master_port)]
    shown = " ".join(["torchrun", *command[3:], script])
    print(f"starting {jobs} x `{shown}` at once (several seconds)...", flush=True)
    running = []
    finished = []
    try:
        for _ in range(jobs):
            running.append(subprocess.Popen([*command, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True))
        for process in running:
            stdout, stderr = process.communicate(timeout=120)  # a hung job is an error, not a cell that never ends
            if process.returncode != 0 and "EADDRINUSE" not in stderr:  # a failure this demo is not about
                raise RuntimeError(f"`{shown}` exited with {process.returncode}; its error output ends:\n"
                                   + "\n".join(stderr.splitlines()[-40:]))
            finished.append({"command": " ".join(["torchrun", *process.args[3:-1], script]),
                             "exit code": process.returncode, "printed": (stdout.strip().splitlines() or [""])[-1],
                             "EADDRINUSE": "EADDRINUSE" in stderr})
    finally:
        stop_torchruns(running)  # on a timeout or Ctrl-C: torchrun and its ranks, which run in sessions of their own
    return finished


if __name__ == "__main__":  # forkserver_first_and_later runs this in a fresh Python
    print(json.dumps(_time_forkserver_launches(int(sys.argv[1]), int(sys.argv[2]))))


class _CodeLine(str):
    """A line of code equal to the same line indented differently (moved under `try:`, say)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.strip() == other.strip()

    def __hash__(self) -> int:
        return hash(self.strip())


def _functions_and_main(source: str, names: tuple[str, ...]) -> list[_CodeLine]:
    """The functions ``names`` of ``source`` and its ``if`` blocks (``__main__``), without comments."""
    kept = [node for node in ast.parse(source).body
            if getattr(node, "name", None) in names or isinstance(node, ast.If)]
    return [_CodeLine(line) for node in kept for line in ast.unparse(node).splitlines()]


def classic_changes(lesson_00: str, script: str) -> str:
    """A unified diff, without context lines, from lesson 00's classic example (the file its
    ``%%writefile my_work/classic_ddp.py`` cell writes, read from the notebook) to ``script``: their
    ``setup``, ``demo_basic`` and launch (``run_demo`` against the ``__main__`` block). The script's
    ``train_step``, which holds the training body, goes with its ``demo_basic``."""
    cells = json.loads(Path(lesson_00).read_text())["cells"]
    classic = next("".join(c["source"]) for c in cells
                   if "".join(c["source"]).startswith("%%writefile my_work/classic_ddp.py"))
    before = _functions_and_main(classic.split("\n", 1)[1], ("setup", "demo_basic", "run_demo"))
    after = _functions_and_main(Path(script).read_text(), ("setup", "train_step", "demo_basic"))
    return "\n".join(difflib.unified_diff(before, after, "classic example", script, n=0, lineterm=""))


ABORT_SERIES = Path(__file__).with_name("recorded") / "abort_at_exit.json"


def abort_at_exit_table(path: Path = ABORT_SERIES) -> list[str]:
    """The kept series of lesson 02's rare abort at exit, one line per series, labelled as recorded.

    Each series gives [aborted at exit, runs counted] without and with ``leave()`` (null: not run),
    runs counted being those that exited 0 or aborted after every line. A series that keeps
    ``runs``, the runs launched of each kind, also gets its runs that failed otherwise (launched
    minus counted); one without it says "not kept". ``tools/abort_at_exit_check.py --record NAME``
    appends a new one."""
    record = json.loads(Path(path).read_text())
    kinds = ("without leave()", "with leave()")

    def cell(count: list[int] | None) -> str:
        return "not run" if count is None else f"{count[0]} of {count[1]} aborted"

    def failed(entry: dict) -> str:
        if "runs" not in entry:
            return "not kept"
        return ", ".join(f"{entry['runs'] - entry[kind][1]} {kind.split()[0]}"
                         for kind in kinds if entry[kind] is not None)

    lines = ["recorded series, not run in this notebook:",
             f"{'series':24} {'without leave()':18} {'with leave()':18} {'failed otherwise':20} versions"]
    for entry in record["series"]:
        lines.append(f"{entry['series']:24} {cell(entry['without leave()']):18} {cell(entry['with leave()']):18} "
                     f"{failed(entry):20} torch {entry['torch']}, Python {entry['python']}")
    return lines


GLOO_SHUTDOWN_SERIES = Path(__file__).with_name("recorded") / "gloo_shutdown.json"


def gloo_shutdown_table(path: Path = GLOO_SHUTDOWN_SERIES) -> list[str]:
    """The kept series of lesson 02's hangs at the end of a gloo DDP worker, one line per series.

    Each series gives [hung, runs] for each ending of ``tools/gloo_shutdown_check.py`` (null: not
    run in that series), labelled as recorded like ``abort_at_exit_table``."""
    record = json.loads(Path(path).read_text())
    endings = record["endings"]

    def cell(count: list[int] | None) -> str:
        return "not run" if count is None else f"{count[0]} of {count[1]} hung"

    lines = ["recorded series, not run in this notebook:",
             f"{'series':22} " + " ".join(f"{ending:24}" for ending in endings) + " versions"]
    for entry in record["series"]:
        lines.append(f"{entry['series']:22} " + " ".join(f"{cell(entry[ending]):24}" for ending in endings)
                     + f" torch {entry['torch']}")
    return lines
