"""``python -m ddp_lib``: list the workers, run one on N ranks, or run a benchmark.

Exit codes: 0 success; 1 a worker failed (the message names the rank); 2 bad input (one line
on stderr, nothing started). Under torchrun (RANK set), ``run`` runs this process's rank only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from ddp_lib.errors import LaunchInputError, LaunchTimeout, WorkerError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage block: errors are for people
        raise LaunchInputError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m ddp_lib", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="name the runnable workers, one line each")
    run = commands.add_parser("run", help="run a worker on N ranks", add_help=False)
    run.add_argument("name")
    bench = commands.add_parser("bench", help="run a benchmark", add_help=False)
    bench.add_argument("name")
    return parser


def _worker_parser(name: str, worker) -> argparse.ArgumentParser:
    parser = _Parser(prog=f"python -m ddp_lib run {name}", description=worker.summary)
    parser.add_argument("--world-size", help="number of ranks (ignored under torchrun, which sets WORLD_SIZE)")
    parser.add_argument("--backend", help="gloo or nccl (default: nccl if every rank has a GPU, else gloo)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds before a hung job is stopped")
    parser.add_argument("--json", action="store_true", help="print the per-rank results as JSON on the last line")
    for option in worker.options:
        if option.type is bool:
            parser.add_argument(option.flag, action="store_true", help=option.help)
        else:
            parser.add_argument(option.flag, type=option.type, default=option.default, help=option.help)
    return parser


def _run(name: str, argv: list[str]) -> int:
    from ddp_lib.workers import WORKERS

    if name not in WORKERS:
        raise LaunchInputError(f"unknown worker {name!r}; accepted: {', '.join(sorted(WORKERS))}")
    worker = WORKERS[name]
    opts = _worker_parser(name, worker).parse_args(argv)
    fn = worker.load()
    args = tuple(getattr(opts, o.flag.lstrip("-").replace("-", "_")) for o in worker.options)
    if "RANK" in os.environ:
        return _run_this_rank(fn, args, opts.json)

    from ddp_lib.launch import DEFAULT_TIMEOUT, spawn

    if opts.world_size is None:
        raise LaunchInputError("--world-size is required (a whole number of processes, 1 or more)")
    try:
        world_size = int(opts.world_size)
    except ValueError:
        raise LaunchInputError(
            f"--world-size must be a whole number of processes (1 or more), got {opts.world_size!r}") from None
    results = spawn(fn, world_size, args, backend=opts.backend, timeout=opts.timeout or DEFAULT_TIMEOUT)
    if opts.json:
        print(json.dumps(results, default=repr))
    else:
        for rank, result in enumerate(results):
            print(f"rank {rank} returned {result!r}")
    return 0


def _run_this_rank(fn, args: tuple, as_json: bool) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    result = record(fn)(rank, world_size, *args)  # torchrun's error summary then shows the cause
    line = json.dumps({"rank": rank, "result": result}, default=repr) if as_json else f"rank {rank} returned {result!r}"
    # One write: ranks share the terminal, and print() may write the newline separately.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    return 0


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
        if known.command == "bench":
            from ddp_lib.bench import run_benchmark

            return run_benchmark(known.name, rest)
        return _run(known.name, rest)
    except LaunchInputError as exc:
        print(f"ddp_lib: error: {exc}", file=sys.stderr)
        return 2
    except (WorkerError, LaunchTimeout) as exc:
        print(f"ddp_lib: {exc}", file=sys.stderr)
        return 1
