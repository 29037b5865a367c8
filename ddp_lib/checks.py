"""Checks on what a launch is given, run in the caller before any process starts.

Each failure is a LaunchInputError whose one-line message names the value and what is accepted.
"""

from __future__ import annotations

import functools
import multiprocessing
import numbers
import pickle
import pkgutil
from collections.abc import Callable

from ddp_lib.device import check_backend, default_backend
from ddp_lib.errors import LaunchInputError

START_METHODS = ("forkserver", "spawn", "fork")


def check_world_size(world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, numbers.Integral):
        raise LaunchInputError(f"world_size must be a whole number of processes (1 or more), got {world_size!r}")
    if world_size < 1:
        raise LaunchInputError(f"world_size must be 1 or more, got {world_size}")
    return int(world_size)


def check_args(args: object) -> tuple:
    if not isinstance(args, tuple):
        hint = f"args=({args!r},)" if not isinstance(args, list) else f"args=tuple({args!r})"
        raise LaunchInputError(
            f"args must be a tuple of extra arguments for the worker, got {type(args).__name__} {args!r}; "
            f"(x) is just x in Python, write {hint}"
        )
    return args


def check_kwargs(kwargs: object) -> dict:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise LaunchInputError(f"kwargs must be a dict of keyword arguments for the worker, got {kwargs!r}")
    return kwargs


def check_picklable(args: tuple, kwargs: dict) -> None:
    try:
        pickle.dumps((args, kwargs))
    except Exception as exc:
        raise LaunchInputError(f"the worker's arguments cannot be sent to the child processes: {exc}") from None


def unwrap_partial(fn: object, args: tuple, kwargs: dict) -> tuple[object, tuple, dict]:
    """``functools.partial(f, *a, **k)`` becomes ``f`` with ``a`` before ``args`` and ``k`` under ``kwargs``."""
    if isinstance(fn, functools.partial):  # partial of a partial is flattened by functools itself
        return fn.func, fn.args + args, {**fn.keywords, **kwargs}
    return fn, args, kwargs


def check_worker(fn: object) -> str:
    """Return the "module:qualname" name by which child processes import the worker.

    A worker defined in the script being run (``__main__`` with a file) is accepted: children
    import that script as ``__mp_main__``, as multiprocessing does. One defined in a notebook,
    the REPL or ``python -c`` has no file to import and is refused.
    """
    if not callable(fn):
        raise LaunchInputError(f"the worker must be a function, got {type(fn).__name__} {fn!r}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    label = qualname or repr(fn)
    move = "define it at the top level of a module and import it from there (or use one from ddp_lib.workers)"
    if not module or not qualname:
        raise LaunchInputError(f"worker {label} has no importable name; {move}")
    in_main = module in ("__main__", "__mp_main__")
    not_in_main_file = (
        f"worker {label} is defined in __main__ (this notebook or script), which child processes cannot "
        f"import; {move}, e.g. %%writefile my_worker.py then from my_worker import {qualname}"
    )
    if in_main and not _main_is_a_script():
        raise LaunchInputError(not_in_main_file)
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise LaunchInputError(
            f"worker {label} is a lambda or a nested function, which child processes cannot import; {move}")
    name = f"{module}:{qualname}"
    try:
        found = pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError) as exc:
        if in_main:
            raise LaunchInputError(not_in_main_file) from None
        raise LaunchInputError(f"worker {module}.{qualname} cannot be imported by name ({exc}); {move}") from None
    if found is not fn:
        raise LaunchInputError(
            f"worker {module}.{qualname} is not the object that name imports (was the module reloaded?); "
            "import the worker again"
        )
    return name


def _main_is_a_script() -> bool:
    """Whether children can import ``__main__`` again from its file, as multiprocessing's spawn
    and forkserver do (a script run with ``python file.py`` or ``python -m``; not a notebook,
    the REPL or ``python -c``)."""
    import os
    import sys

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return bool(path) and str(path).endswith(".py") and os.path.isfile(path) and not hasattr(main, "get_ipython")


def check_start_method(start_method: object) -> str:
    available = [m for m in START_METHODS if m in multiprocessing.get_all_start_methods()]
    if start_method is None:
        return available[0]
    if start_method not in available:
        raise LaunchInputError(f"start_method must be one of {', '.join(map(repr, available))}, got {start_method!r}")
    return start_method


def check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0:
        raise LaunchInputError(f"timeout must be a number of seconds above 0, or None for no deadline, got {timeout!r}")
    return float(timeout)


def check_launch(fn: Callable, world_size: object, args: object, kwargs: object, backend: object,
                 start_method: object, timeout: object) -> tuple:
    """Validate a launch; return (fn_ref, world_size, args, kwargs, backend, start_method, timeout)."""
    world_size = check_world_size(world_size)
    fn, args, kwargs = unwrap_partial(fn, check_args(args), check_kwargs(kwargs))
    check_picklable(args, kwargs)
    fn_ref = check_worker(fn)
    backend = default_backend(world_size) if backend is None else check_backend(backend, world_size)
    return fn_ref, world_size, args, kwargs, backend, check_start_method(start_method), check_timeout(timeout)
