"""One torch DDP step profiled on rank 0 (2 ranks, small buckets): when backward's operators ran
on the training thread, and when gloo's all-reduces ran on gloo's own thread. This shows whether
communication overlaps backward, measured rather than asserted.

    python -m ddp_lib bench overlap [--json]

The kept run's JSON is in the repository (lesson 08 reads it):

    python -m ddp_lib bench overlap --json > ddp_lib/bench/results/overlap.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from ddp_lib.bench.ranks import DDP_BATCH, DDP_WIDTHS, _train_step
from ddp_lib.bench.report import run_main
from ddp_lib.launch import spawn
from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.shared import make_mlp

FULL_RUN = Path(__file__).with_name("results") / "overlap.json"
BUCKET_CAP_MB = 1.0  # small enough for several buckets, so early ones can go out during backward
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "  # how the profiler names a backward operator
ALLREDUCE_NAME = "gloo:all_reduce"  # gloo's own record of one all-reduce, on gloo's worker thread
COLUMNS = [("lane", "lane", "s"), ("name", "event", "s"), ("start_ms", "start (ms)", ".3f"),
           ("end_ms", "end (ms)", ".3f")]


def profile_ddp_step(rank: int, world_size: int, bucket_cap_mb: float = BUCKET_CAP_MB, seed: int = 0) -> list[dict]:
    """Profile one SGD step of torch's DDP after three warm-up steps; rank 0's backward operators
    and all-reduces as {"lane", "name", "start_ms", "end_ms"}, times from the step's start."""
    with process_group(rank, world_size) as device:
        model = wrap_ddp(make_mlp(seed, DDP_WIDTHS).to(device), device, bucket_cap_mb=bucket_cap_mb)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(seed + rank)
        x = torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=g)
        y = torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=g)
        for _ in range(3):  # DDP rebuilds its buckets after the first step; the rest warm up
            _train_step(model, optimizer, x, y)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _train_step(model, optimizer, x, y)
        events = prof.events()
        origin = min(e.time_range.start for e in events)
        rows = []
        for e in events:
            if e.name.startswith(BACKWARD_PREFIX):
                lane, name = "backward", e.name.removeprefix(BACKWARD_PREFIX)
            elif e.name == ALLREDUCE_NAME:
                lane, name = "all-reduce", e.name
            else:
                continue
            rows.append({"lane": lane, "name": name, "start_ms": round((e.time_range.start - origin) / 1e3, 3),
                         "end_ms": round((e.time_range.end - origin) / 1e3, 3)})
        return sorted(rows, key=lambda r: r["start_ms"])


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": rank 0's backward operators and all-reduces of one profiled DDP step}."""
    rows = spawn(profile_ddp_step, 2, show_output=False, env={"OMP_NUM_THREADS": "1"})[0]
    return {"rows": rows, "bucket_cap_mb": BUCKET_CAP_MB, "torch": torch.__version__,
            "load_average": round(os.getloadavg()[0], 1)}


def full_run() -> dict:
    """The run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def backward_end_ms(result: dict) -> float:
    """When the last backward operator finished."""
    return max(r["end_ms"] for r in result["rows"] if r["lane"] == "backward")


def overlapped_ms(result: dict) -> float:
    """How long all-reduces ran while backward was still running (the union of their intervals
    up to backward's end)."""
    end = backward_end_ms(result)
    total, reached = 0.0, 0.0
    for r in sorted((r for r in result["rows"] if r["lane"] == "all-reduce"), key=lambda r: r["start_ms"]):
        start, stop = max(r["start_ms"], reached), min(r["end_ms"], end)
        if stop > start:
            total += stop - start
        reached = max(reached, r["end_ms"])
    return total


def main(argv: list[str]) -> int:
    return run_main(argv, "overlap", __doc__, measure, COLUMNS)
