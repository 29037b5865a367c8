"""Checks on what a launch is given, run in the caller before any process starts.

:func:`check_launch` is the one check of a launch (world size, the worker and its arguments, the
environment, backend, start method, timeout); ``ddp_lib.launch``, ``ddp_lib.mp`` and the command
line call it. Each failure is a LaunchInputError whose one-line message names the value and what is
accepted.
"""

from __future__ import annotations

import functools
import inspect
import math
import multiprocessing
import numbers
import os
import pickle
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddp_lib.errors import LaunchInputError
from ddp_lib.launch._worker_params import NEEDS, is_ddp_lib_worker, value_problem, worker_params

# Nothing here imports torch at module level (the backend checks import it when called), so that
# ``python -m ddp_lib`` can check the environment before torch reads it at import.

START_METHODS = ("forkserver", "spawn", "fork")

# One machine: each rank is a whole torch process (hundreds of MB, threads, sockets to every
# peer). Beyond this, use several nodes with torchrun; DDP_LIB_MAX_WORLD_SIZE raises the cap.
MAX_WORLD_SIZE = 64
MAX_WORLD_SIZE_ENV = "DDP_LIB_MAX_WORLD_SIZE"
# The longest wait multiprocessing.connection.wait accepts is about 24.8 days (2**31 ms);
# beyond a week, no deadline (None) says what is meant.
MAX_TIMEOUT = 7 * 24 * 3600.0

# What the launcher sets for every rank itself: an override would point ranks at another job's
# store, or give two ranks the same rank.
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")  # TORCH_DISTRIBUTED_DEBUG, any case (torch's c10d debug.cpp)

# What torchrun's agent (torch 2.13, elastic/agent/server/local_elastic_agent.py) sets for every
# worker. All of them set means "started by torchrun"; MASTER_ADDR/MASTER_PORT are left out of
# the test because tutorials export them by hand and the launcher ignores them anyway.
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                 "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE")
TORCHRUN_ADDRESS_VARS = ("MASTER_ADDR", "MASTER_PORT")


# The most threads per rank OMP_NUM_THREADS may ask for: far above any machine's cores, and far
# below the C int that torch.set_num_threads takes (2147483648 fails inside every rank).
MAX_THREADS = 4096


def whole_number(text: str) -> int | None:
    """``text`` as a whole number if it is ASCII digits only (surrounding spaces allowed), else None.
    Stricter than int() and str.isdigit(): "1_0", "٣" and "²" are refused, not read as 10, 3 or an error."""
    text = text.strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def max_world_size() -> int:
    """The most ranks one launch may start: MAX_WORLD_SIZE, or DDP_LIB_MAX_WORLD_SIZE when set."""
    raw = os.environ.get(MAX_WORLD_SIZE_ENV)
    if raw is None:
        return MAX_WORLD_SIZE
    value = whole_number(raw)
    if value is None or value < 1:
        raise LaunchInputError(f"{MAX_WORLD_SIZE_ENV} must be a whole number (ASCII digits), 1 or more, got {raw!r}")
    return value


def check_world_size(world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, numbers.Integral):
        raise LaunchInputError(f"world_size must be a whole number of processes (1 or more), got {world_size!r}")
    if world_size < 1:
        raise LaunchInputError(f"world_size must be 1 or more, got {world_size}")
    limit = max_world_size()
    if world_size > limit:
        raise LaunchInputError(
            f"world_size {world_size} is more processes than one machine should run (at most {limit}; this machine "
            f"has {os.cpu_count()} CPU cores): for more ranks use several nodes with torchrun, "
            f"or set {MAX_WORLD_SIZE_ENV} to raise the limit")
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
    """``functools.partial(f, **k)`` becomes ``f`` with ``k`` under ``kwargs``. A partial that binds
    positional arguments is refused: torch's mp.spawn calls it as ``f(*bound, rank, *args)``, the rank
    after them, which no worker of the rank-first convention expects."""
    if isinstance(fn, functools.partial):  # partial of a partial is flattened by functools itself
        if fn.args:
            bound = ", ".join(map(repr, fn.args))
            raise LaunchInputError(
                f"functools.partial({getattr(fn.func, '__name__', fn.func)!s}, {bound}) binds positional arguments, "
                f"which the worker would receive before the rank: pass them in args instead, or bind them by name "
                f"(functools.partial(f, name=value))")
        return fn.func, args, {**fn.keywords, **kwargs}
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
    if (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout)
            or not 0 < timeout <= MAX_TIMEOUT):
        raise LaunchInputError(f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f} (a week), "
                               f"or None for no deadline, got {timeout!r}")
    return float(timeout)


def check_worker_arguments(fn: Callable, args: tuple, kwargs: dict, *, passes_world_size: bool = True,
                           as_flags: bool = False) -> None:
    """Refuse a value the worker's signature rules out: a choice outside its ``Literal[...]``, or, for
    ddp_lib's own workers, one that :data:`ddp_lib.launch._worker_params.RULES` declares wrong for a parameter
    of that name (``epochs=0``, ``lr=float("nan")``), or a parameter given without the one it needs
    (:data:`ddp_lib.launch._worker_params.NEEDS`: ``resume`` without ``checkpoint_dir``). Arguments that do
    not fit the signature at all are left to the worker, whose TypeError then names the rank.
    ``passes_world_size``: the worker is called as fn(rank, world_size, ...) (else fn(i, ...), as by
    torch.multiprocessing); ``as_flags``: name the value as the command line's option (``--epochs``)."""
    leading = (0, 1) if passes_world_size else (0,)  # stand-ins for rank (and world_size)
    try:
        bound = inspect.signature(fn).bind(*leading, *args, **kwargs)
        params = worker_params(fn, leading=len(leading))
    except (TypeError, ValueError):
        return
    named = {param.name: param for param in params}
    for param in params:
        if param.name in bound.arguments:
            problem = value_problem(param, bound.arguments[param.name])
            if problem:
                raise LaunchInputError(f"{param.flag if as_flags else param.name} {problem}")
    bound.apply_defaults()
    for name, needed in NEEDS.items():
        if (is_ddp_lib_worker(fn) and name in named and needed in named
                and bound.arguments.get(name) and not bound.arguments.get(needed)):
            shown = (named[name].flag, named[needed].flag) if as_flags else (f"{name}=True", needed)
            raise LaunchInputError(f"{shown[0]} needs {shown[1]}, got {bound.arguments.get(needed)!r}")


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse values of variables torch or the ranks read that would fail only inside a rank
    (OMP_NUM_THREADS) or at ``import torch`` (TORCH_DISTRIBUTED_DEBUG)."""
    threads = environ.get("OMP_NUM_THREADS")
    if threads is not None and not 1 <= (whole_number(threads) or 0) <= MAX_THREADS:
        raise LaunchInputError(
            f"OMP_NUM_THREADS must be a whole number of threads per rank (ASCII digits), 1 to {MAX_THREADS}, "
            f"got {threads!r}")
    debug = environ.get("TORCH_DISTRIBUTED_DEBUG")
    # isascii: "detaıl" (dotless i) upper-cases to "DETAIL" in Python but not in torch's C++.
    if debug is not None and not (debug.isascii() and debug.upper() in DEBUG_LEVELS):
        raise LaunchInputError(
            f"TORCH_DISTRIBUTED_DEBUG must be one of {', '.join(DEBUG_LEVELS)} (any case), got {debug!r}")


def check_env(env: object, world_size: int) -> list[dict[str, str]]:
    """Check ``env=``: extra variables for every rank (a dict), or for each rank its own (a list of
    ``world_size`` dicts), together with the environment the ranks inherit; return one dict of
    strings per rank."""
    if env is None:
        env = {}
    if isinstance(env, (list, tuple)):
        if len(env) != world_size:
            raise LaunchInputError(f"env is a list of {len(env)} dicts for world_size {world_size}: give one dict "
                                   "per rank, or one dict for every rank")
        return [_check_one_env(one, f"env[{rank}]") for rank, one in enumerate(env)]
    return [_check_one_env(env, "env")] * world_size


def _check_one_env(env: object, where: str) -> dict[str, str]:
    if not isinstance(env, Mapping) or not all(isinstance(k, str) for k in env):
        raise LaunchInputError(f"{where} must be a dict of environment variable names to values, got {env!r}")
    reserved = [k for k in env if k in LAUNCHER_VARS]
    if reserved:
        raise LaunchInputError(
            f"{where} may not set {', '.join(reserved)}: the launcher sets {', '.join(LAUNCHER_VARS)} for every rank "
            "itself (to run ranks elsewhere, use torchrun)")
    env = {k: str(v) for k, v in env.items()}
    for name, value in env.items():
        # What os.environ refuses in the rank (its ValueError would end it as "exited with code 1").
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise LaunchInputError(f"{where}: {name!r}={value!r} is not an environment variable: a name is not empty "
                                   "and holds no '=' or NUL character, and a value holds no NUL character")
    check_environment({**os.environ, **env})
    return env


def torchrun_mode(environ: Mapping[str, str], world_size: object = None) -> bool:
    """True when torchrun started this process: every variable torchrun sets is set. Some set and
    others not, or a ``world_size`` other than torchrun's WORLD_SIZE, is refused in one line."""
    present = [k for k in TORCHRUN_VARS if k in environ]
    if not present:
        return False
    missing = [k for k in TORCHRUN_VARS + TORCHRUN_ADDRESS_VARS if k not in environ]
    if missing:
        raise LaunchInputError(
            f"{', '.join(present)} set in the environment but not {', '.join(missing)}: this is not a rank "
            f"started by torchrun; unset {', '.join(present)} to launch with --world-size, or start it with torchrun")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if whole_number(environ[name]) is None:
            raise LaunchInputError(f"{name} must be a whole number under torchrun, got {environ[name]!r}")
    if world_size is not None and str(world_size) != environ["WORLD_SIZE"]:
        raise LaunchInputError(
            f"--world-size {world_size} contradicts WORLD_SIZE={environ['WORLD_SIZE']} set by torchrun: under "
            "torchrun the number of ranks is torchrun's (--nnodes x --nproc-per-node); drop --world-size")
    return True


@dataclass(frozen=True)
class Launch:
    """A launch that passed :func:`check_launch`: what the launcher starts, nothing left to check."""

    fn_ref: str  # "module:qualname", imported by name in each child
    world_size: int
    args: tuple
    kwargs: dict
    backend: str
    start_method: str
    timeout: float | None
    env: list[dict[str, str]]  # extra variables, one dict per rank


# First parameter names that say "the rank" (mp.spawn's examples call it i, gpu or proc too).
_RANK_NAMES = {"i", "gpu", "gpu_id", "device_id", "proc", "proc_id", "process_id", "idx", "index", "pid"}


def check_takes_rank_first(name: str, fn) -> None:
    """Refuse a function whose first two parameters are not the rank and world size, such as a
    torchrun script's ``main(save_every, total_epochs, ...)``, which reads them from the environment:
    called as fn(rank, world_size, ...), its save_every would silently be the rank."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params[:2]):
        return
    first = positional[0].name if positional else None
    if len(positional) >= 2 and ("rank" in first.lower() or first in _RANK_NAMES):
        return
    shown = ", ".join(p.name for p in params[:3]) + (", ..." if len(params) > 3 else "")
    raise LaunchInputError(
        f"worker {name} takes ({shown}), but run calls it as fn(rank, world_size, --options...): give it rank "
        "and world_size as its first two parameters (a torchrun script's main(), which reads RANK and "
        "WORLD_SIZE from the environment, runs with torchrun instead)")


def launch_backend(backend: object, world_size: int) -> str:
    """The backend of a launch of ``world_size`` ranks: the device rule's default for None, else
    ``backend`` checked by ``ddp_lib.process_group.check_backend`` (the one check, also run by each
    rank), its ValueError raised as LaunchInputError."""
    from ddp_lib.device import default_backend  # imports torch
    from ddp_lib.process_group import check_backend

    if backend is None:
        return default_backend(world_size)
    try:
        return check_backend(backend, world_size)
    except ValueError as e:
        raise LaunchInputError(str(e)) from None


def check_launch(fn: Callable, world_size: object, args: object = (), kwargs: object = None, *,
                 backend: object = None, start_method: object = None, timeout: object = None, env: object = None,
                 show_output: object = True, passes_world_size: bool = True, as_flags: bool = False) -> Launch:
    """Check a launch before any process starts: the world size, the worker (importable by name in
    the children) and its arguments (picklable, values its signature allows), ``env`` together with
    the environment the ranks inherit, the backend (default: the device rule's), the start method,
    the timeout and ``show_output``. ``passes_world_size`` and ``as_flags``: see :func:`check_worker_arguments`."""
    world_size = check_world_size(world_size)
    if not (show_output is True or show_output is False or show_output == "stdout"):
        raise LaunchInputError(f"show_output must be True, False or 'stdout', got {show_output!r}")
    fn, args, kwargs = unwrap_partial(fn, check_args(args), check_kwargs(kwargs))
    check_picklable(args, kwargs)
    fn_ref = check_worker(fn)
    check_worker_arguments(fn, args, kwargs, passes_world_size=passes_world_size, as_flags=as_flags)
    env = check_env(env, world_size)
    backend = launch_backend(backend, world_size)
    return Launch(fn_ref, world_size, args, kwargs, backend, check_start_method(start_method),
                  check_timeout(timeout), env)
