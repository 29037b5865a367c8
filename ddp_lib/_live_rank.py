"""What each live rank runs (:mod:`ddp_lib.live`): a loop that takes cells from the notebook's
kernel, runs them in a namespace kept between cells, and answers with the last expression's value
as text, a value asked for, or the error and the learner's line that raised it.

It is a worker like any other, started by the launcher's :func:`ddp_lib._child.run_rank`: its
output goes to the rank's files, its watchdog ends it when the kernel dies, and its stack can be
dumped at a deadline. Messages are pickled with :mod:`pickle`, not sent as objects: a tensor sent
through multiprocessing's pickler would travel as shared memory.
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

from ddp_lib.errors import _installed, _short_path


def serve(rank: int, world_size: int, *, commands) -> None:
    """Run cells sent through ``commands`` until the kernel says "exit" or goes away."""
    namespace = {"__name__": "__rank__", "__builtins__": __builtins__, "rank": rank, "world_size": world_size}
    cell_files: set[str] = set()
    commands.send_bytes(pickle.dumps(("ready",)))
    while True:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # only a running cell takes the stop button
        try:
            kind, *details = pickle.loads(commands.recv_bytes())
        except (EOFError, OSError):
            return  # the kernel has gone
        if kind == "exit":
            return
        reply = _run_cell(*details, namespace, cell_files) if kind == "cell" else _get(*details, namespace, cell_files)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            blob = pickle.dumps(reply)
        except Exception as exc:
            blob = pickle.dumps(("error", type(exc).__qualname__, f"cannot send the value back: {exc}", "", ""))
        commands.send_bytes(blob)


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
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except BaseException as exc:  # KeyboardInterrupt and SystemExit too: the rank lives on
        return _error(exc, cell_files)
    return ("done", None if value is None else repr(value))


def _get(expression: str, namespace: dict, cell_files: set[str]) -> tuple:
    """("value", the expression's value, tensors detached and on the CPU) or ("error", ...)."""
    try:
        value = eval(compile(expression, "<get>", "eval"), namespace)
    except Exception as exc:
        return _error(exc, cell_files)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
    return ("value", value)


def _error(exc: BaseException, cell_files: set[str]) -> tuple:
    """("error", type name, message, traceback from the learner's first cell frame on, the learner's
    innermost line as "cell 5 line 3: print(y)")."""
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
    text = re.sub(r'File "([^"]+)"', _package_path, "".join(traceback.format_exception(type(exc), exc, tb)))
    return ("error", type(exc).__qualname__, message, text, where)


def _package_path(found: re.Match) -> str:
    """An installed file by its place in its package (torch/nn/modules/module.py), not by where this
    machine installed it: a notebook's stored error reads the same everywhere."""
    path = found.group(1)
    return f'File "{_short_path(path)}"' if _installed(path) else found.group(0)
