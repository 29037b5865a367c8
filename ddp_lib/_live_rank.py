"""What each live rank runs (:mod:`ddp_lib.live`): a loop that takes cells from the notebook's
kernel, runs them in a namespace kept between cells, and answers with the last expression's value
as text, a value asked for, or the error and the learner's line that raised it. Each command comes
with a number and its answer carries it back, so that an answer can never be taken for another's.

It is a worker like any other, started by the launcher's :func:`ddp_lib.launch._child.run_rank`: its
output goes to the rank's files, its watchdog ends it when the kernel dies, and its stack can be
dumped at a deadline. Messages are pickled with :mod:`pickle`, not sent as objects: a tensor sent
through multiprocessing's pickler would travel as shared memory. A value asked for is pickled on its
own, inside the answer: the kernel reads the answer (its number) even when the value cannot be
unpickled there.
"""

from __future__ import annotations

import ast
import linecache
import pickle
import re
import signal
import sys
import traceback

import torch

from ddp_lib.errors import installed, may_be_echo, short_path

GET_FILE = "ranks.get"  # how errors and stacks name the expression of a get


def serve(rank: int, world_size: int, *, commands) -> None:
    """Run cells sent through ``commands`` until the kernel says "exit" or goes away."""
    namespace = {"__name__": "__rank__", "__builtins__": __builtins__, "rank": rank, "world_size": world_size}
    cell_files: set[str] = set()
    commands.send_bytes(pickle.dumps((0, "ready")))
    while True:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # only a running cell takes the stop button
        try:
            number, kind, *details = pickle.loads(commands.recv_bytes())
        except (EOFError, OSError):
            return  # the kernel has gone
        if kind == "exit":
            return
        reply = _run_cell(*details, namespace, cell_files) if kind == "cell" else _get(*details, namespace, cell_files)
        sys.stdout.flush()
        sys.stderr.flush()
        commands.send_bytes(pickle.dumps((number, *reply)))


def _run_cell(source: str, filename: str, namespace: dict, cell_files: set[str]) -> tuple:
    """("done", text of the last expression's value or None) or ("error", ...)."""
    cell_files.add(filename)
    # Registered so that tracebacks and stacks show the cell's lines (mtime None: never checked on disk).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        tree = ast.parse(source, filename)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)  # shown as a notebook shows a cell's last value
        body = compile(tree, filename, "exec")
        shown = compile(last, filename, "eval") if last is not None else None
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            exec(body, namespace)
            value = eval(shown, namespace) if shown is not None else None
            text = None if value is None else repr(value)  # a __repr__ that raises is the cell's error
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except BaseException as exc:  # KeyboardInterrupt and SystemExit too: the rank lives on
        return _error(exc, cell_files)
    return ("done", text)


def _get(expression: str, namespace: dict, cell_files: set[str]) -> tuple:
    """("value", the expression's value pickled, tensors detached and on the CPU) or ("error", ...)."""
    # Named as a cell is, so that an error or a stack at a deadline names the expression, not this loop.
    cell_files.add(GET_FILE)
    linecache.cache[GET_FILE] = (len(expression), None, [expression + "\n"], GET_FILE)
    try:
        code = compile(expression, GET_FILE, "eval")
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the stop button stops a get as a cell
        try:
            value = eval(code, namespace)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()  # a meta tensor raises here: the get's error
    except BaseException as exc:  # KeyboardInterrupt and SystemExit too, as in a cell: the rank lives on
        return _error(exc, cell_files)
    try:
        return ("value", pickle.dumps(value))
    except Exception as exc:
        return ("error", type(exc).__qualname__, _unsendable(value, exc), "", "")


def _unsendable(value: object, exc: Exception) -> str:
    """Why ``value`` cannot come back to the notebook, in one line."""
    kind = type(value)
    if kind.__module__ == "__rank__":
        return (f"cannot send the value back: its type {kind.__qualname__} was defined in a %%ranks cell, "
                f"which the notebook cannot import; bring back plain data (numbers, lists, tensors), "
                f"such as a model's state_dict()")
    try:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__qualname__
    except Exception:
        why = type(exc).__qualname__
    if "__rank__" in why:  # a list or dict holding such a value
        return (f"cannot send the value back: it is or holds a function or class defined on the ranks, which the "
                f"notebook cannot import ({why}); bring back plain data (numbers, lists, tensors)")
    return f"cannot send the value back: {why}"


def _error(exc: BaseException, cell_files: set[str]) -> tuple:
    """("error", type name, message, traceback from the learner's first cell frame on, the learner's
    innermost line as "cell 5 line 3: print(y)", whether it may be a peer's echo: errors.may_be_echo)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in cell_files:
        tb = tb.tb_next  # this loop's own frames are nothing the learner wrote
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename in cell_files:
        where = f"{exc.filename} line {exc.lineno}: {(exc.text or '').strip()}"
    for frame, line in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if filename in cell_files:
            code = linecache.getline(filename, line).strip()
            where = f"{filename} line {line}: {code}" if code else f"{filename} line {line}"
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be made)"
    # Display only: the traceback's package paths shortened for the learner.
    text = re.sub(r'File "([^"]+)"', _package_path, "".join(traceback.format_exception(type(exc), exc, tb)))
    return ("error", type(exc).__qualname__, message, text, where, may_be_echo(exc))


def _package_path(found: re.Match) -> str:
    """An installed file by its place in its package (torch/nn/modules/module.py), not by where this
    machine installed it: a notebook's stored error reads the same everywhere."""
    path = found.group(1)
    return f'File "{short_path(path)}"' if installed(path) else found.group(0)
