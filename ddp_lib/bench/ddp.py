"""A DDP step against a local step of the same model (1 and 2 ranks), and lesson 04's three
from-scratch DDPs against torch's DDP (2 ranks): every way stepped in turn in one run. Each
rank gets one thread, so a rank computes alike on 1 and 2 ranks, and a busy machine's cores are
not fought over by a rank's own threads.

    python -m ddp_lib bench ddp [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 reads it beside a quick live run):

    python -m ddp_lib bench ddp --json > ddp_lib/bench/results/ddp.json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddp_lib.bench.ranks import DDP_BATCH, DDP_WIDTHS, ddp_steps
from ddp_lib.bench.report import machine, run_main
from ddp_lib.launch import run_ranks

FULL_RUN = Path(__file__).with_name("results") / "ddp.json"
SCRATCH = ["after_backward", "per_parameter_hooks", "buckets"]
COLUMNS = [("world_size", "ranks", "d"), ("way", "way", "s"), ("step_ms", "step (ms)", ".2f"),
           ("baseline", "against", "s"), ("ratio", "ratio", ".2f"), ("allreduces", "all-reduces/step", "d")]


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": DDP vs local on 1 and 2 ranks, then each scratch way vs torch on 2 ranks;
    "all_reduce_ms": one bare all-reduce of the gradients' bytes on 2 ranks, timed beside them;
    "extra_quartiles_ms": {"1", "2" ranks: the first and third quartiles of DDP's step minus the
    local step, round by round}}."""
    repeats = repeats or (5 if quick else 30)
    load_before = os.getloadavg()[0]
    rows = []
    extra_quartiles_ms = {}  # DDP minus local, per round (the two share each round's load): its middle half
    for world_size in (1, 2):
        ways = ["local", "torch"] + (SCRATCH + ["all_reduce"] if world_size == 2 else [])
        result = run_ranks(ddp_steps, world_size, args=(ways, repeats), show_output=False,
                           env={"OMP_NUM_THREADS": "1"})[0]
        step = result["step_s"]
        extra_quartiles_ms[str(world_size)] = [round(q * 1e3, 3) for q in result["extra_quartiles_s"]]
        rows.append({"world_size": world_size, "way": "local", "step_ms": round(step["local"] * 1e3, 3),
                     "baseline": None, "ratio": None, "allreduces": None})
        rows.append({"world_size": world_size, "way": "torch", "step_ms": round(step["torch"] * 1e3, 3),
                     "baseline": "local", "ratio": round(step["torch"] / step["local"], 3),
                     "allreduces": result["allreduces"]["torch"]})
        if world_size == 2:
            all_reduce_ms = round(step["all_reduce"] * 1e3, 3)
        for way in SCRATCH if world_size == 2 else []:
            rows.append({"world_size": world_size, "way": way, "step_ms": round(step[way] * 1e3, 3),
                         "baseline": "torch", "ratio": round(step[way] / step["torch"], 3),
                         "allreduces": result["allreduces"][way]})
    return {"rows": rows, "model_widths": list(DDP_WIDTHS), "batch_per_rank": DDP_BATCH, "repeats": repeats,
            # One bare all-reduce of the gradients' bytes on 2 ranks, timed in the same rotation.
            "all_reduce_ms": all_reduce_ms,
            "extra_quartiles_ms": extra_quartiles_ms,
            "gradient_bytes": 4 * sum(a * b + b for a, b in zip(DDP_WIDTHS, DDP_WIDTHS[1:])),
            **machine(), "load_average": round(max(load_before, os.getloadavg()[0]), 1)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def _notes(result: dict) -> str:
    by = {(r["world_size"], r["way"]): r for r in result["rows"]}
    lines = [f"MLP widths {result['model_widths']}, batch {result['batch_per_rank']} per rank, "
             f"one thread per rank, median of {result['repeats']} steps per way after 2 warm-up rounds"]
    one = by[(1, "torch")]["ratio"]
    verdict = "met" if one <= 1.10 else "missed"
    lines.append(f"goal DDP on 1 rank within 1.10x of the local step: {one:.2f}x ({verdict})")
    bucketed = by[(2, "buckets")]["ratio"]
    lines.append(f"goal bucketed from-scratch DDP within 1.2x of torch DDP (2 ranks): {bucketed:.2f}x "
                 f"({'met' if bucketed <= 1.2 else 'missed'})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_main(argv, "ddp", __doc__, measure, COLUMNS, _notes)


def interpolated_us(rows: list[dict], nbytes: int, world_size: int = 2) -> float:
    """The all-reduce benchmark's median time (us) at ``nbytes``, interpolated linearly between the two
    measured sizes around it (``world_size`` ranks)."""
    points = sorted((r["bytes"], r["time_us"]) for r in rows if r["world_size"] == world_size)
    for (b0, t0), (b1, t1) in zip(points, points[1:]):
        if b0 <= nbytes <= b1:
            return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    raise ValueError(f"{nbytes} B lies outside the measured sizes")


def model_verdict(result: dict, alpha: float, beta: float, detail: bool = False,
                  sweep: dict | None = None) -> str:
    """Where DDP's extra time on 2 ranks goes (DDP step minus local step, medians). First the alpha-beta
    fit's own estimate (one all-reduce of the gradients' bytes, plus DDP's own work: the 1-rank DDP step
    minus the 1-rank local step, no partner), judged within 25%. Then the sum of two parts measured in the
    same run, the bare all-reduce and DDP's own work: a check that the parts add up, within 25%. With
    ``sweep`` (the all-reduce benchmark's result), a last line: the same run's bare all-reduce against the
    benchmark's time at that size. With ``detail``, instead: the medians, the spread over rounds, the
    extra time split into the bare all-reduce, DDP's own work and the rest, and the bare all-reduce
    against the fit."""
    steps = {(r["world_size"], r["way"]): r["step_ms"] for r in result["rows"]}
    model_ms = (alpha + result["gradient_bytes"] / beta) * 1e3
    own_ms = steps[1, "torch"] - steps[1, "local"]
    extra_ms, bare_ms = steps[2, "torch"] - steps[2, "local"], result["all_reduce_ms"]
    predicted_ms = bare_ms + own_ms
    parts = {"the all-reduce": bare_ms, "DDP's own work": own_ms}
    parts["the rest"] = extra_ms - sum(parts.values())
    largest = max(parts, key=parts.get)
    spread = result.get("extra_quartiles_ms")
    if not detail:
        lines = [
            f"measured: DDP step - local step = {extra_ms:.2f} ms (medians, 2 ranks)",
            f"the fit: {model_ms:.2f} ms all-reduce + {own_ms:.2f} ms DDP's own work (1 rank) = "
            f"{model_ms + own_ms:.2f} ms; the fit within 25%: {abs(extra_ms / (model_ms + own_ms) - 1) < 0.25}",
            f"the same run's parts: bare all-reduce {bare_ms:.2f} ms + DDP's own work {own_ms:.2f} ms = "
            f"{predicted_ms:.2f} ms; the parts add up within 25%: {abs(extra_ms / predicted_ms - 1) < 0.25} "
            f"({(extra_ms - predicted_ms) / predicted_ms:+.0%})",
        ]
        if sweep is not None:
            bench_ms = interpolated_us(sweep["rows"], result["gradient_bytes"]) / 1e3
            lines.append(
                f"this run's bare all-reduce of {result['gradient_bytes'] / 1e6:.2f} MB: {bare_ms:.2f} ms, "
                f"{bare_ms / bench_ms:.1f}x the all-reduce benchmark's {bench_ms:.2f} ms at that size, "
                "interpolated between its rows")
        return "\n".join(lines)
    return "\n".join([
        f"median steps (ms): 2 ranks, local {steps[2, 'local']:.2f}, DDP {steps[2, 'torch']:.2f}; "
        f"1 rank, local {steps[1, 'local']:.2f}, DDP {steps[1, 'torch']:.2f}",
        f"DDP step - local step = {extra_ms:.2f} ms, a difference of medians"
        + (f"; per round, middle half {spread['2'][0]:.2f} to {spread['2'][1]:.2f} ms, so DDP's step was longer "
           f"in at least 3 rounds of 4: {spread['2'][0] > 0}" if spread else ""),
        "split: " + " + ".join(f"{name} {ms:.2f}" for name, ms in parts.items()) + f" = {extra_ms:.2f} ms; "
        f"largest: {largest}, {parts[largest] / extra_ms:.0%}",
        f"the fit's all-reduce: 1 x {alpha * 1e3:.2f} ms + {result['gradient_bytes'] / 1e6:.2f} MB / "
        f"{beta / 1e9:.3f} GB/s = {model_ms:.2f} ms; the bare all-reduce took {bare_ms / model_ms:.1f}x that "
        f"({bare_ms - model_ms:+.2f} ms; load average {result['load_average']})",
    ])
