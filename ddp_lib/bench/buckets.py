"""torch DDP's step time and all-reduces per step against bucket_cap_mb (2 ranks), the bucket
sizes stepped in turn in one run, one thread per rank.

    python -m ddp_lib bench buckets [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 draws its verdicts from it):

    python -m ddp_lib bench buckets --json > ddp_lib/bench/results/buckets.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddp_lib.bench.ranks import DDP_WIDTHS, bucket_sweep
from ddp_lib.bench.report import machine, run_main
from ddp_lib.bench.wide import paired_wins, sign_test_wins
from ddp_lib.launch import run_ranks

FULL_RUN = Path(__file__).with_name("results") / "buckets.json"

# None: bucket_cap_mb left out. DDP then uses 25 MiB too, but a first bucket of at most 1 MiB
# (_BucketCapacityConfig in torch/nn/parallel/distributed.py): not the same as passing 25.
CAPS_MB = [0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 25.0, None]
QUICK_CAPS_MB = [0.01, 0.5, 25.0, None]
# No ratio column: one run's step times move with the load, and a ratio to 25 MiB reads as a verdict.
COLUMNS = [("label", "bucket_cap_mb", "s"), ("allreduces", "all-reduces/step", "d"), ("step_ms", "step (ms)", ".2f")]


def cap_label(cap_mb: float | None) -> str:
    """How a table or a figure names a bucket_cap_mb: its value, or "default" when left out."""
    return "default" if cap_mb is None else f"{cap_mb:g}"


def measure(quick: bool = False, repeats: int | None = None, world_size: int = 2) -> dict:
    """{"rows": one per bucket_cap_mb: all-reduces per step, median step time, ratio to
    bucket_cap_mb=25, and DDP's buckets in bytes (the reducer's) in the first step and after DDP
    rebuilt them, with the first step's all-reduces}."""
    repeats = repeats or (5 if quick else 100)
    caps = QUICK_CAPS_MB if quick else CAPS_MB
    load_before = os.getloadavg()[0]
    sweep = run_ranks(bucket_sweep, world_size, args=(caps, repeats), show_output=False,
                      env={"OMP_NUM_THREADS": "1"})[0]
    step_25 = next(r["step_s"] for r in sweep if r["bucket_cap_mb"] == 25.0)
    rows = [{"bucket_cap_mb": r["bucket_cap_mb"], "label": cap_label(r["bucket_cap_mb"]), "allreduces": r["allreduces"],
             "step_ms": round(r["step_s"] * 1e3, 3), "ratio": round(r["step_s"] / step_25, 3),
             "rounds_ms": [round(t * 1e3, 3) for t in r["rounds_s"]],
             **{key: r[key] for key in ("first_step_allreduces", "first_step_bucket_bytes", "bucket_bytes")}}
            for r in sweep]
    return {"rows": rows, "world_size": world_size, "model_widths": list(DDP_WIDTHS), "repeats": repeats,
            **machine(), "load_average": round(max(load_before, os.getloadavg()[0]), 1)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def timed_verdict(result: dict, cut: bool = False) -> str:
    """Each bucket_cap_mb's step against the default's (left out), round by round: a sign test over the
    paired rounds, both ways for each cap, Bonferroni's rule over the whole family. With ``cut``, a first
    line prints the number of tests and the wins each side needs."""
    rounds = {r["label"]: r["rounds_ms"] for r in result["rows"]}
    default = rounds["default"]
    others = [label for label in rounds if label != "default"]
    needed = sign_test_wins(len(default), tests=2 * len(others))
    lines = ([f"{2 * len(others)} tests: a side counts as shorter in at least {needed} of {len(default)} paired rounds"]
             if cut else [])
    for label in others:
        mine, theirs = paired_wins(rounds[label], default)
        shorter = f"cap {label}" if mine >= needed else "default" if theirs >= needed else "undecided"
        lines.append(f"cap {label:>5} against the default: shorter in {mine} of {len(default)} rounds, "
                     f"the default in {theirs}; shorter: {shorter}")
    lines.append(f"load average {result['load_average']} while it ran")
    return "\n".join(lines)


def _notes(result: dict) -> str:
    return (f"{result['world_size']} ranks of one thread, MLP widths {result['model_widths']}, "
            f"median of {result['repeats']} "
            "steps per size; all-reduces counted by a hook on an untimed copy, after DDP rebuilt its buckets")


def main(argv: list[str]) -> int:
    return run_main(argv, "buckets", __doc__, measure, COLUMNS, _notes)


def bucket_verdict(result: dict) -> str:
    """Per cap, the all-reduces and bucket sizes of step 1 and of the later steps; whether step 1 sent one
    bucket whatever the cap, and whether the default's first bucket closed at 1 MiB."""
    lines = [f"bucket_cap_mb={r['label']:>7}: step 1: {r['first_step_allreduces']} all-reduce(s), buckets of "
             f"{r['first_step_bucket_bytes']} B; from step 2: {r['allreduces']}, buckets of {r['bucket_bytes']} B"
             for r in result["rows"]]
    default = next(r["bucket_bytes"] for r in result["rows"] if r["label"] == "default")
    one_first = all(r["first_step_allreduces"] == 1 for r in result["rows"])
    lines += [f"step 1 sent one bucket whatever the cap: {one_first}",
              f"default, from step 2: the first bucket reached 1 MiB ({2**20} B) and closed: {default[0] >= 2**20}"]
    return "\n".join(lines)
