"""Benchmarks: ``python -m ddp_lib bench NAME``. Each prints a table (or JSON with --json) of
medians over repeats after warm-up, and ratios measured side by side in the same run."""

from __future__ import annotations

import importlib

from ddp_lib.errors import LaunchInputError

BENCHMARKS = {
    "launch": ("ddp_lib.bench.launch", "a 2- and 4-rank launch through ddp_lib against plain mp.spawn"),
}


def run_benchmark(name: str, argv: list[str]) -> int:
    if name not in BENCHMARKS:
        raise LaunchInputError(f"unknown benchmark {name!r}; accepted: {', '.join(sorted(BENCHMARKS))}")
    return importlib.import_module(BENCHMARKS[name][0]).main(argv)
