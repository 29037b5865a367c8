"""Benchmarks: ``python -m ddp_lib bench NAME``. Each prints a table (or JSON with --json) of
medians over repeats after warm-up, and ratios measured side by side in the same run."""

from __future__ import annotations

import importlib

from ddp_lib.errors import LaunchInputError

BENCHMARKS = {
    "launch": ("ddp_lib.bench.launch_cost", "a 2- and 4-rank launch through ddp_lib against plain mp.spawn"),
    "allreduce": ("ddp_lib.bench.allreduce",
                  "all-reduce time, algbw, busbw against size; memory copy and loopback limits"),
    "ring": ("ddp_lib.bench.ring", "lesson 01's ring all-reduce against dist.all_reduce, as a ratio"),
    "ddp": ("ddp_lib.bench.ddp", "a DDP step against a local step; lesson 04's from-scratch DDPs against torch's"),
    "overlap": ("ddp_lib.bench.overlap",
                "DDP steps profiled, small buckets and one bucket in turn: backward and the all-reduces in time"),
    "pinned": ("ddp_lib.bench.pinned", "2 ranks' small all-reduces with a core each, then sharing one core"),
    "buckets": ("ddp_lib.bench.buckets", "DDP step time and all-reduces per step against bucket_cap_mb"),
    "startup": ("ddp_lib.bench.startup", "spawn, forkserver, fork and ddp_lib's launcher: start-up cost"),
    "scaling": ("ddp_lib.bench.scaling", "samples per second of the training worker on 1, 2 and 4 ranks"),
    "wide": ("ddp_lib.bench.wide", "a wider model: one process against DDP on 2 ranks, one bucket and default buckets"),
}


def run_benchmark(name: str, argv: list[str]) -> int:
    if name not in BENCHMARKS:
        raise LaunchInputError(f"unknown benchmark {name!r}; accepted: {', '.join(sorted(BENCHMARKS))}")
    return importlib.import_module(BENCHMARKS[name][0]).main(argv)
