"""``python -m ddp_lib``: list the workers, run one on N ranks, or run a benchmark.

Exit codes: 0 success; 1 a worker failed (the message names the rank); 2 bad input (one line
on stderr, nothing started); 130 interrupted (Ctrl-C; every rank is stopped); 143 and 129 stopped
by SIGTERM or SIGHUP (the same, with the signal named). Under torchrun
(every variable torchrun sets is set), ``run`` runs this process's rank only.

A worker's options come from its signature (the parameters after rank and world_size): a
``bool`` is a flag ``--name``/``--no-name``, ``int``/``float``/``str`` take a value,
``Literal[...]`` takes one of its choices, ``X | None`` may be left out; defaults are the
signature's and help lines come from the docstring's ``Args:`` block.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys

from ddp_lib.errors import LaunchInputError, LaunchStartError, LaunchTimeout, WorkerError
from ddp_lib.launch._checks import (
    MAX_TIMEOUT,
    check_environment,
    check_launch,
    check_takes_rank_first,
    check_timeout,
    check_worker_arguments,
    torchrun_mode,
    whole_number,
)
from ddp_lib.launch._record import json_line, nan_as_null
from ddp_lib.launch._worker_params import Param, worker_params

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a job stopped by Ctrl-C
# Signals that end the command as Ctrl-C does (a scheduler's or `kill`'s SIGTERM, a closed
# terminal's SIGHUP): every rank stopped, one line, and multiprocessing's and the launcher's
# temporary folders removed (Python's default for them ends the process on the spot, leaving both).
STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _stopped_as_by_ctrl_c(received: list[int]):
    """Inside the block, the signals of STOPPING_SIGNALS raise KeyboardInterrupt, as Ctrl-C does, and
    are appended to ``received``; the previous handlers come back after it."""
    def stop(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, stop) for sig in STOPPING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class OneLineParser(argparse.ArgumentParser):
    """argparse for people: no prefixes of options, and an error is one line (LaunchInputError, exit 2)."""

    def __init__(self, *args, **kwargs):
        # No prefixes of options: "--epoch" must not quietly mean "--epochs" (nor a worker's
        # option that a later version adds).
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):  # one line, no usage block: errors are for people
        raise LaunchInputError(message)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m ddp_lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    commands.add_parser("list", help="name the runnable workers, one line each")
    run = commands.add_parser("run", help="run a worker on N ranks", add_help=False)
    run.add_argument("name")
    bench = commands.add_parser("bench", help="run a benchmark", add_help=False)
    bench.add_argument("name")
    return parser


def _converter(param: Param):
    """The argparse ``type`` for a parameter: its scalar type; "none" gives None where allowed."""
    scalar = param.type

    def convert(text: str):
        if param.optional and scalar is not str and text.lower() == "none":
            return None
        return scalar(text)

    convert.__name__ = scalar.__name__  # argparse names it in "invalid int value: 'x'"
    return convert


def _help(param: Param) -> str:
    text = param.help or param.name.replace("_", " ")
    if param.required:
        return f"{text} (required)"
    if param.type is bool and param.choices is None:
        return f"{text} (default: {'--' if param.default else '--no-'}{param.flag[2:]})"
    return f"{text} (default: {param.default!r})"


def _timeout(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = text
    try:
        return check_timeout(value)
    except LaunchInputError:
        raise LaunchInputError(f"--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f} (a week), "
                               f"or 'none' for no deadline, got {text!r}") from None


def _worker_parser(prog: str, summary: str, params: list[Param]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=f"python -m ddp_lib run {prog}", description=summary)
    parser.add_argument("--world-size", help="number of ranks (under torchrun, torchrun's; leave it out)")
    parser.add_argument("--backend", help="gloo or nccl (default: nccl if every rank has a GPU, else gloo)")
    parser.add_argument("--timeout", help="seconds before a hung job is stopped (default: 300; 'none': no deadline; "
                                          "under torchrun: none unless given, each rank then its own)")
    parser.add_argument("--json", action="store_true",
                        help="print the per-rank results as JSON on the last line (nan and inf as null)")
    worker = parser.add_argument_group(f"options of {prog}")
    for param in params:
        if param.type is None:
            if param.required:
                raise LaunchInputError(f"worker {prog}: parameter {param.name} has no type the command line can "
                                       "give (bool, int, float, str, Literal[...] or X | None)")
            continue  # left at the signature's default
        default = None if param.required else param.default
        try:
            if param.type is bool and param.choices is None:
                worker.add_argument(param.flag, dest=param.name, action=argparse.BooleanOptionalAction,
                                    default=default, required=param.required, help=_help(param))
            else:
                worker.add_argument(param.flag, dest=param.name, type=_converter(param), choices=param.choices,
                                    default=default, required=param.required, help=_help(param))
        except argparse.ArgumentError:  # e.g. a parameter named timeout or backend
            raise LaunchInputError(f"worker {prog}: parameter {param.name} clashes with the launcher's own option "
                                   f"{param.flag}; rename the parameter") from None
    return parser


def _load(name: str):
    """A registered worker's (function, summary), or any ``module:function``."""
    import pkgutil

    from ddp_lib.launch._worker_params import summary
    from ddp_lib.workers import WORKERS

    if name in WORKERS:
        return WORKERS[name].load(), WORKERS[name].summary
    if ":" in name:
        try:
            fn = pkgutil.resolve_name(name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise LaunchInputError(f"cannot import worker {name!r}: {exc}") from None
        if not callable(fn):
            raise LaunchInputError(f"{name} is not a function, got {type(fn).__name__}")
        check_takes_rank_first(name, fn)
        return fn, summary(fn)
    raise LaunchInputError(f"unknown worker {name!r}; accepted: {', '.join(sorted(WORKERS))}, or module:function")


def _run(name: str, argv: list[str]) -> int:
    fn, summary = _load(name)
    params = worker_params(fn)
    opts = _worker_parser(name, summary, params).parse_args(argv)
    kwargs = {p.name: getattr(opts, p.name) for p in params if p.type is not None}
    if torchrun_mode(os.environ, opts.world_size):  # this process is one rank: only its values to check
        check_worker_arguments(fn, (), kwargs, as_flags=True)
        return _run_this_rank(fn, kwargs, opts.json, None if opts.timeout is None else _timeout(opts.timeout))

    if opts.world_size is None:
        raise LaunchInputError("--world-size is required (a whole number of processes, 1 or more)")
    text = opts.world_size.strip()
    sign = -1 if text.startswith("-") else 1
    number = whole_number(text[1:] if sign < 0 else text)
    if number is None:  # int() would take "1_0" as 10 and "٣" as 3
        raise LaunchInputError(
            f"--world-size must be a whole number of processes (1 or more), got {opts.world_size!r}")
    from ddp_lib.launch import LAUNCH_TIMEOUT_S, start

    timeout = LAUNCH_TIMEOUT_S if opts.timeout is None else _timeout(opts.timeout)
    checked = check_launch(fn, sign * number, kwargs=kwargs, backend=opts.backend, timeout=timeout, as_flags=True)
    with _stopped_as_by_ctrl_c(_received):
        results = start(checked).results
    _report(dict(enumerate(results)), results, opts.json)
    return 0


def _run_this_rank(fn, kwargs: dict, as_json: bool, timeout: float | None = None) -> int:
    from ddp_lib.launch._rank_side import run_this_rank
    from ddp_lib.launch._record import stdout_in_folder

    def report(rank: int, result: object, written: bool) -> None:
        # The result is in this rank's folder under torchrun's --log-dir (result.json), with or without
        # --json. With --json also printed, unless the rank's stdout goes to that folder too
        # (--redirects), where the file says it already.
        if not as_json or not written or not stdout_in_folder():
            _report({rank: result}, {"rank": rank, "result": result}, as_json)
        else:
            _report({rank: result}, None, as_json, quiet=True)  # only the line about numbers that are not finite

    return run_this_rank(fn, kwargs, timeout=timeout, report=report)


def _report(by_rank: dict[int, object], payload: object, as_json: bool, quiet: bool = False) -> None:
    """Print ``payload`` as JSON on one line, or one line per rank of ``by_rank``; say on stderr
    where a number is not finite (a diverged loss): JSON has no nan or inf, so they become null.
    ``quiet``: only that line on stderr."""
    bad = [(f"rank {rank} {path}".strip(), value)
           for rank, result in by_rank.items() for path, value in nan_as_null(result)[1]]
    if bad:
        where = ", ".join(f"{path} = {value}" for path, value in bad[:3]) + (" ..." if len(bad) > 3 else "")
        print(f"ddp_lib: {len(bad)} number(s) in the results are not finite ({where})"
              + ("; written as null in the JSON" if as_json else ""), file=sys.stderr)
    if quiet:
        return
    if as_json:
        text = json_line(payload)
    else:
        text = "\n".join(f"rank {rank} returned {result!r}" for rank, result in by_rank.items())
    # One write: ranks under torchrun share the terminal, and print() may write the newline separately.
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _whole_error(exc: WorkerError | LaunchTimeout) -> str:
    """The error as the command line prints it: the worker's whole message (a state_dict
    mismatch lists its keys on the lines after the first), and where a timed-out rank was."""
    text = str(exc)
    full = getattr(exc, "full_message", "")
    if isinstance(exc, WorkerError) and "\n" in full.strip():
        text = f"rank {exc.rank} raised {exc.exc_type}: {full.strip()}" if exc.exc_type else \
            f"rank {exc.rank} {full.strip()}"
    if isinstance(exc, LaunchTimeout) and exc.__cause__ is not None:
        text += "\n" + str(exc.__cause__).strip()
    return text


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        known, rest = _parser().parse_known_args(argv)
        if known.command == "list":
            from ddp_lib.workers import WORKERS

            width = max(map(len, WORKERS))
            for name, worker in WORKERS.items():
                print(f"{name:<{width}}  {worker.summary}")
            return 0
        # torch reads TORCH_DISTRIBUTED_DEBUG when it is imported (a bad value is a traceback
        # from deep inside `import torch`), and each rank reads OMP_NUM_THREADS: check both first.
        check_environment(os.environ)
        if known.command == "bench":
            from ddp_lib.bench import run_benchmark

            with _stopped_as_by_ctrl_c(_received):
                return run_benchmark(known.name, rest)
        return _run(known.name, rest)
    except LaunchInputError as exc:
        print(f"ddp_lib: error: {exc}", file=sys.stderr)
        return 2
    except (WorkerError, LaunchTimeout) as exc:
        print(f"ddp_lib: {_whole_error(exc)}", file=sys.stderr)
        return 1
    except LaunchStartError as exc:
        print(f"ddp_lib: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if not _received:
            print("ddp_lib: interrupted; every rank was stopped", file=sys.stderr)
            return EXIT_INTERRUPTED
        received = signal.Signals(_received[0])
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(f"ddp_lib: stopped by {received.name}; every rank was stopped", file=sys.stderr)
        return 128 + received.value
    finally:
        _received.clear()


_received: list[int] = []  # the stopping signals received during this command (see _stopped_as_by_ctrl_c)
