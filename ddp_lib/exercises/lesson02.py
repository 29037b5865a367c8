"""Checkers for lesson 02's exercises: ``collect(fn, args, nprocs)``, each rank's value brought back
from torch's ``mp.spawn`` through a queue, also when a rank fails or puts nothing;
``plan_launch(world_size, out_dir)``, the arguments of ``mp.spawn``, checked as each child would use
them, without starting a process; and a script that must run under ``python`` with ``mp.spawn``."""

import ast
import faulthandler
import functools
import inspect
import linecache
import multiprocessing
import os
import pickle
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ddp_lib.exercises.checking import Report

PLAN_OUT_DIR = "my_work/lesson02-calls"  # handed to plan_launch; nothing is written there

# --- Exercise 1: collect(fn, args, nprocs), the values of mp.spawn's ranks through a queue ---------------

BIG = 20_000  # numbers per value: a value pickles to about 100 KB, more than a pipe holds (64 KiB on Linux)


def put_value(rank: int, values: list, results) -> None:
    """A rank that puts ``(rank, values[rank])`` in ``results``."""
    results.put((rank, values[rank]))


def fail_before_put(rank: int, values: list, bad_rank: int, results) -> None:
    """A rank that puts its value, except ``bad_rank``, which raises first."""
    if rank == bad_rank:
        raise ValueError(f"rank {rank} fails before its put")
    results.put((rank, values[rank]))


def return_without_put(rank: int, values: list, silent_rank: int, results) -> None:
    """A rank that puts its value, except ``silent_rank``, which returns without a put."""
    if rank != silent_rank:
        results.put((rank, values[rank]))


def _run_collect(collect: Callable, fn: Callable, args: tuple, nprocs: int, conn, dump_path: str) -> None:
    """In a process of its own: ``collect(fn, args, nprocs)``, its result or error sent on ``conn``.
    SIGUSR1 writes where it waits to ``dump_path``, for a checker that has waited too long."""
    # A forkserver's child has the forkserver as its default start method; the learner's kernel has
    # the platform's (fork on Linux up to Python 3.13), so mp.SimpleQueue() means what it means there.
    multiprocessing.set_start_method(None, force=True)
    with open(dump_path, "w") as dump:
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=False)
        try:
            conn.send(("ok", collect(fn, args, nprocs)))
        except BaseException as e:  # the learner's error, any kind: report it, then end
            conn.send(("error", type(e).__name__, str(e)))


def _waiting_line(dump_path: str, filename: str) -> str:
    """The learner's line that the process was in when it dumped its stack ('' if none)."""
    text = Path(dump_path).read_text() if os.path.exists(dump_path) else ""
    lines = [int(n) for f, n in re.findall(r'File "([^"]+)", line (\d+)', text) if f == filename]
    return linecache.getline(filename, lines[0]).strip() if lines else ""


def _stop_with_children(process) -> None:
    """End ``process`` and every process under it (its ranks)."""
    import psutil

    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    process.kill()
    process.join()


def _call_collect(collect: Callable, fn: Callable, args: tuple, nprocs: int, timeout: float):
    """``("ok", result)``, ``("error", type name, message)`` or ``("hang", the learner's line)``."""
    filename = inspect.getsourcefile(collect) or ""
    context = multiprocessing.get_context("forkserver")  # torch is loaded there already: starts fast
    receive, send = context.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="lesson02-collect-") as folder:
        dump_path = os.path.join(folder, "stack.txt")
        process = context.Process(target=_run_collect, args=(collect, fn, args, nprocs, send, dump_path))
        process.start()
        send.close()
        if receive.poll(timeout):
            try:
                outcome = receive.recv()
            except EOFError:
                outcome = ("error", "exit", f"the process running collect ended with code {process.exitcode}")
            process.join(10)
            if process.is_alive():
                _stop_with_children(process)
            return outcome
        os.kill(process.pid, signal.SIGUSR1)  # where is it waiting?
        time.sleep(0.5)
        line = _waiting_line(dump_path, filename)
        _stop_with_children(process)
        return ("hang", line)


def _hang_said(line: str, timeout: float, why: str) -> str:
    if ".get(" in line:
        return (f"collect still waited after {timeout:.0f} s, in `{line}`: {why}. A bare get() waits for ever. "
                "Read only what is there, in a loop on context.join(timeout=...), which raises once a rank has failed")
    if "spawn(" in line or "start_processes(" in line:
        return (f"collect still waited after {timeout:.0f} s, in `{line}`: with join=True, mp.spawn waits for the "
                "ranks to end, and a rank's large put waits for a reader. Pass join=False and read while you join")
    where = f" in `{line}`" if line else ""
    return f"collect still waited after {timeout:.0f} s{where}: {why}"


def _error_said(kind: str, message: str) -> str:
    if "SemLock created in a fork context" in message:
        return ("mp.spawn refused the queue: the default mp.SimpleQueue() is fork's on Linux. "
                "Make it with mp.get_context(\"spawn\").SimpleQueue()")
    last = [line for line in message.splitlines() if line.strip()]
    return f"collect raised {kind}: {last[-1].strip() if last else message}"


def check_collect(collect: Callable, world_sizes: Sequence[int] = (2, 3), timeout: float = 30.0) -> Report:
    """A report on ``collect(fn, args, nprocs)``: on each world size, ranks that put values of about
    100 KB must come back in rank order; then one rank raises before its put, and ``collect`` must
    raise; then one rank puts nothing, and ``collect`` must raise too. A ``collect`` that still waits
    after ``timeout`` seconds is stopped, and the line it waited in is named."""
    report = Report()
    for size in world_sizes:
        values = [[random.randrange(10**6) for _ in range(BIG)] for _ in range(size)]
        outcome = _call_collect(collect, put_value, (values,), size, timeout)
        where = f"world_size {size}"
        if outcome[0] == "hang":
            report.fail(f"{where}: " + _hang_said(outcome[1], timeout, "every rank put its value"))
        elif outcome[0] == "error":
            report.fail(f"{where}: " + _error_said(outcome[1], outcome[2]))
        elif outcome[1] == values:
            report.ok(f"{where}: every rank's value came back, in rank order")
        elif isinstance(outcome[1], list) and outcome[1] and isinstance(outcome[1][0], tuple):
            report.fail(f"{where}: collect returned (rank, value) pairs; return the values alone, in rank order")
        elif isinstance(outcome[1], list) and sorted(outcome[1]) == sorted(values):
            report.fail(f"{where}: the values came back in the order the ranks put them; return them in rank order")
        else:
            shown = f"{len(outcome[1])} values" if isinstance(outcome[1], list) else repr(outcome[1])[:60]
            report.fail(f"{where}: collect returned {shown}, not the {size} values the ranks put, in rank order")
        if not report.passed:
            return report
    size = 2
    values = [[random.randrange(10**6) for _ in range(10)] for _ in range(size)]
    bad = random.randrange(size)
    outcome = _call_collect(collect, fail_before_put, (values, bad), size, timeout)
    where = f"rank {bad} of {size} raises before its put"
    if outcome[0] == "hang":
        report.fail(f"{where}: " + _hang_said(outcome[1], timeout, f"rank {bad} failed and will never put"))
    elif outcome[0] == "ok":
        report.fail(f"{where}: collect returned {outcome[1]!r:.60}; let the error of context.join reach the caller")
    elif "fails before its put" in outcome[2]:
        report.ok(f"{where}: collect raised {outcome[1]} with the rank's error")
    else:
        report.fail(f"{where}: " + _error_said(outcome[1], outcome[2]) + "; the rank's own error should come back")
    silent = random.randrange(size)
    outcome = _call_collect(collect, return_without_put, (values, silent), size, timeout)
    where = f"rank {silent} of {size} returns without a put"
    if outcome[0] == "hang":
        report.fail(f"{where}: " + _hang_said(outcome[1], timeout, f"rank {silent} ended without a put"))
    elif outcome[0] == "ok":
        report.fail(f"{where}: collect returned {outcome[1]!r:.60}; once every rank has ended, check that each "
                    "put a value, and raise if one did not")
    else:
        report.ok(f"{where}: collect raised {outcome[1]}")
    return report


# --- Exercise 2: plan_launch(world_size, out_dir), the keyword arguments of mp.spawn ---------------------

def _plan_problem(plan: object, world_size: int, out_dir: str) -> str | None:
    """Why ``mp.spawn(**plan)`` would not run ``record_args(i, world_size, out_dir)`` in child i (None: it would)."""
    if not isinstance(plan, dict) or not {"fn", "args", "nprocs"} <= set(plan):
        return (f"plan_launch returned {plan!r:.60}; return the keyword arguments of mp.spawn: "
                "dict(fn=..., args=..., nprocs=...)")
    fn, args, nprocs = plan["fn"], plan["args"], plan["nprocs"]
    if nprocs != world_size:
        return f"nprocs is {nprocs!r}: mp.spawn starts nprocs children, one per rank, so nprocs=world_size"
    if isinstance(args, (str, dict)):
        return (f"args is the {type(args).__name__} {args!r}: * unpacks a string into its characters and a dict "
                "into its keys; put the values in a tuple")
    try:
        args = tuple(args)
    except TypeError:
        return (f"args is the {type(args).__name__} {args!r}, not an iterable: each child runs fn(i, *args), "
                "and (x) is just x in Python: write (x, ...)")
    target = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(target, "__qualname__", repr(target))
    if getattr(target, "__module__", None) == "__main__":
        return (f"fn is {name}, defined in the notebook: a spawned child's __main__ has no such function; "
                "import the worker from a module, as record_args is")
    for what, value in (("fn", fn), ("args", args)):
        try:
            pickle.dumps(value)
        except Exception as e:  # PicklingError, TypeError, AttributeError: each names the object
            shown = re.sub(r" at 0x[0-9a-f]+", "", str(e))
            return (f"{what} does not pickle ({type(e).__name__}: {shown}); mp.spawn pickles fn and args for "
                    "each child: a lambda, a function defined inside another, or an open file cannot go")
    if (getattr(target, "__module__", None), name) != ("ddp_lib.workers.spawning", "record_args"):
        return f"fn is {name}; the worker to start is record_args, itself or in a functools.partial"
    for i in range(nprocs):
        try:
            bound = inspect.signature(fn).bind(i, *args)
        except TypeError as e:
            return (f"child {i} would call fn({i}, *args) and get TypeError: {e}; mp.spawn puts the index i "
                    "first, so args holds only what comes after the rank")
        bound.apply_defaults()
        got = dict(bound.arguments)
        expected = {"i": i, "world_size": world_size, "out_dir": out_dir}
        if got != expected:
            called = ", ".join(f"{k}={v!r}" for k, v in got.items())
            return f"child {i} would run record_args({called}); it should get i={i}, world_size={world_size}, " \
                   f"out_dir={out_dir!r}"
    return None


def check_plan_launch(plan_launch: Callable, world_sizes: Sequence[int] = (2, 3)) -> Report:
    """A report on ``plan_launch(world_size, out_dir)``, the keyword arguments of ``mp.spawn`` that start
    ``world_size`` ranks of ``record_args``: for each world size, what each child would unpickle and call."""
    report = Report()
    for world_size in world_sizes:
        where = f"world_size {world_size}"
        try:
            problem = _plan_problem(plan_launch(world_size, PLAN_OUT_DIR), world_size, PLAN_OUT_DIR)
        except Exception as e:  # the learner's code raised: say what and where
            problem = f"plan_launch raised {type(e).__name__}: {e}"
        if problem:
            report.fail(f"{where}: {problem}")
        else:
            report.ok(f"{where}: fn and args pickle, and each child i would run record_args(i, {world_size}, out_dir)")
    return report


# --- Exercise 3: a script that launches with mp.spawn, run as `python script.py` ----------------------------

LOADING = "loading the data set"
DONE = "all ranks done"


def _launches(tree: ast.AST) -> list[ast.Call]:
    """The calls of ``spawn`` or ``start_processes`` (``mp.spawn(...)``, ``spawn(...)``) in ``tree``."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("spawn", "start_processes")]


def _top_level_launch(tree: ast.Module) -> bool:
    """Whether a launch runs as the script's own top-level statement (in no function, class or ``if``)."""
    top = [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.If))]
    return any(_launches(node) for node in top)


def check_script(path: str | Path, nprocs: int = 2, timeout: float = 120.0) -> Report:
    """A report on the script at ``path``, run as ``python path``: it must launch ``work`` on ``nprocs``
    ranks with ``mp.spawn``, print LOADING once, each rank's line once, then DONE."""
    report = Report()
    path = Path(path)
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError) as e:
        report.fail(f"{path} does not read as Python: {type(e).__name__}: {e}")
        return report
    launches = _launches(tree)
    if not any(getattr(call.func, "attr", getattr(call.func, "id", None)) == "spawn" for call in launches):
        report.fail("the script no longer calls mp.spawn: keep the launch as it is; what must change is around it")
        return report
    if any(keyword.arg == "start_method" for call in launches for keyword in call.keywords):
        report.fail("keep mp.spawn's own start method, spawn: the fix must hold on macOS and Windows too")
        return report
    if _top_level_launch(tree):
        report.fail(f"mp.spawn runs at the top level of {path.name}. Run it (!python {path}) and read the error a "
                    "child prints: section 4 explains it")
        return report
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=timeout)
    lines = run.stdout.splitlines()
    if "Can't get attribute" in run.stderr and "__mp_main__" in run.stderr:
        report.fail("a child found no worker: it runs the script as __mp_main__, where the guarded block does not "
                    "run. Define work at the top level, and put only what the parent does under the guard")
    elif "bootstrapping phase" in run.stderr:
        report.fail("a child reached a launch while it ran the script again: every launch must be where only "
                    "the parent runs it")
    elif run.returncode != 0:
        error = [line for line in run.stderr.splitlines() if line.strip()]
        report.fail(f"python {path.name} exited with code {run.returncode}: {error[-1] if error else ''}")
    elif not lines:
        report.fail("the script printed nothing: no guarded block ran. Its test compares __name__ with the name "
                    "python gives the script it runs")
    else:
        loads = run.stdout.count(LOADING)  # counted in the text: two ranks' lines may share one
        ranks = [run.stdout.count(f"rank {r} of {nprocs} works") for r in range(nprocs)]
        if loads != 1:
            report.fail(f"'{LOADING}' printed {loads} times: each child runs the script's top-level code again, "
                        "as __mp_main__. Move the loading to where only the parent runs it")
        elif ranks != [1] * nprocs:
            report.fail(f"each rank's line should print once; counts by rank: {ranks}")
        elif run.stdout.count(DONE) != 1:
            report.fail(f"'{DONE}' should print once, in the parent, after mp.spawn returns")
        else:
            report.ok(f"python {path.name}: the data loaded once, in the parent; each of the {nprocs} ranks ran "
                      "work once")
    return report
