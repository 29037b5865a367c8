"""Lesson 09's kept run of the compiled loop with inductor: ``LoopNet(hidden=256)`` for 4 epochs (64
steps) on 2 gloo ranks, eager, then compiled with ``aot_eager``, then with ``inductor`` from an empty
cache.
Inductor's first step generates C++ and compiles it, tens of seconds on a 2-core machine: too long
for the lesson's Run All, so the lesson reads this file. It needs a C++ compiler. The job runs
``REPEATS`` times, each from a new empty cache; each number kept is the median of the repeats, with
their smallest and largest.

    python -m ddp_lib.demos.inductor_timing > ddp_lib/demos/recorded/inductor_timing.json   # a new kept run
"""

import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from ddp_lib.demos.loop_runs import compile_timing

KEPT_RUN = Path(__file__).with_name("recorded") / "inductor_timing.json"
WIDE = dict(epochs=4, hidden=256)  # the lesson's timed runs run 1 epoch: 4 give a steadier median
TIMED = {"eager": WIDE, "aot_eager": dict(WIDE, compile=True, compile_backend="aot_eager"),
         "inductor": dict(WIDE, compile=True, compile_backend="inductor")}
REPEATS = 3


def kept_run() -> dict:
    """The run kept in the repository: {"runs": {backend: rank 0's timings}, "machine", "torch", "recorded"}."""
    return json.loads(KEPT_RUN.read_text())


def kept_run_lines(kept: dict) -> list[str]:
    """A kept run as printable lines: the machine and its load, each backend's first and steady step
    (median [smallest to largest]) and its distance from eager's parameters, then the verdict on
    inductor's break-even against eager."""
    machine = kept["machine"]
    busy = machine["load_average_before"] > machine["cpus"]
    lines = [f"kept run of {kept['recorded']}, torch {kept['torch']}, {machine['cpus']} CPUs, load average "
             f"{machine['load_average_before']} as it started: {'a busy' if busy else 'an idle'} machine"]
    for name, run in kept["runs"].items():
        first, steady = run["first_step_range_s"], [t * 1000 for t in run["steady_step_range_s"]]
        lines.append(f"{name:>9}: first step {run['first_step_s']:6.2f} s [{first[0]:.2f} to {first[1]:.2f}], "
                     f"steady step {run['steady_step_s'] * 1000:.2f} ms [{steady[0]:.2f} to {steady[1]:.2f}], "
                     f"parameters differ from eager's by up to {run['params_max_diff_from_eager']:.0e}")
    eager, inductor = kept["runs"]["eager"], kept["runs"]["inductor"]
    lines.append(f"inductor's first step lasted as long as {inductor['first_step_s'] / inductor['steady_step_s']:,.0f} "
                 "of its steady steps")
    if inductor["steady_step_range_s"][1] < eager["steady_step_range_s"][0]:  # faster in every repeat
        break_even = inductor["first_step_s"] / (eager["steady_step_s"] - inductor["steady_step_s"])
        lines.append(f"break-even, first step / (eager step - inductor step): about 10^{round(math.log10(break_even))} "
                     "steps")
    elif inductor["steady_step_range_s"][0] > eager["steady_step_range_s"][1]:  # slower in every repeat
        lines.append("inductor's steady step was slower than eager's in every repeat: no break-even")
    else:
        lines.append("the repeats' steady steps of eager and inductor overlap: no measurable break-even")
    return lines


def record(repeats: int = REPEATS) -> dict:
    """Run the three loops in one job on 2 ranks, ``repeats`` times, inductor's cache in a new empty folder
    each time. Each timing is the median of the repeats; ``*_range_s`` holds their smallest and largest."""
    from ddp_lib.demos.loop_runs import measured_runs
    from ddp_lib.launch import run_ranks

    load_before = os.getloadavg()[0]
    jobs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            jobs.append(run_ranks(measured_runs, 2, kwargs=dict(runs=TIMED), show_output=False, timeout=1800,
                                  env={"TORCHINDUCTOR_CACHE_DIR": cache})[0])  # empty: the first step compiles
    load_after = os.getloadavg()[0]
    eager = jobs[0]["eager"]
    runs = {}
    for name, run in jobs[0].items():
        timings = [compile_timing(job[name]["step_seconds"]) for job in jobs]
        first = [t["first_step_s"] for t in timings]
        steady = [t["steady_step_s"] for t in timings]
        max_diff = max(abs(a - b) for a, b in zip(run["params"], eager["params"]))
        runs[name] = {"first_step_s": round(statistics.median(first), 4),
                      "first_step_range_s": [round(min(first), 4), round(max(first), 4)],
                      "steady_step_s": round(statistics.median(steady), 6),
                      "steady_step_range_s": [round(min(steady), 6), round(max(steady), 6)],
                      "repeats": repeats,
                      "steps": len(run["step_seconds"]), "compiled_graphs": run["compiled_graphs"],
                      "params_max_diff_from_eager": max_diff,
                      "loss_gap_from_eager": max(abs(a - b) for a, b in zip(run["losses"], eager["losses"]))}
    return {"runs": runs,
            "machine": {"cpus": os.cpu_count(), "load_average_before": round(load_before, 2),
                        "load_average_after": round(load_after, 2),
                        "processor": platform.processor() or platform.machine()},
            "torch": torch.__version__, "recorded": time.strftime("%Y-%m-%d", time.gmtime())}


def main() -> int:
    print(json.dumps(record(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
