"""Lesson 10's kept runs of every strategy on 2 ranks, five runs in a row, each with the load average
sampled while it ran: the step times (the strategies stepped in a shuffled turn, wall clock and the
main thread's CPU time), and the memory torch.profiler measured between steps and at the peak.

    python -m ddp_lib.demos.fsdp_step_times > ddp_lib/demos/recorded/fsdp_step_times.json   # new kept runs
"""

import json
import os
import sys
import threading
from pathlib import Path

import torch

KEPT_RUNS = Path(__file__).with_name("recorded") / "fsdp_step_times.json"
KEPT_RUNS_NAME = "ddp_lib/demos/recorded/fsdp_step_times.json"  # KEPT_RUNS from the repository's root, for printing
STRATEGIES = "ddp,ddp_view,zero1,zero1_view,fsdp,fsdp_no_reshard"


class LoadSampler:
    """Reads the one-minute load average every ``every_s`` seconds while the ``with`` block runs."""

    def __init__(self, every_s: float = 1.0):
        self.every_s, self.samples, self._stop = every_s, [], threading.Event()

    def __enter__(self) -> "LoadSampler":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float:
        return round(sum(self.samples) / len(self.samples), 1)


def record_run(timed_steps: int = 21) -> dict:
    """One run of compare_strategies on 2 ranks: {"step_ms", "step_cpu_ms": rank 0's step times per
    strategy (wall clock; CPU time of its main thread), "measured": {strategy: {"between steps",
    "peak": bytes per rank, as memory_run measured them}}, "collectives": rank 0's c10d collectives
    per step, per strategy, "load_average": the mean of the samples taken while it ran}."""
    from ddp_lib.launch import run_ranks
    from ddp_lib.workers.beyond_ddp import compare_strategies

    with LoadSampler() as load:
        results = run_ranks(compare_strategies, 2,
                            kwargs=dict(strategies=STRATEGIES, timed_steps=timed_steps), show_output=False)
    rank0 = results[0]
    return {"step_ms": {s: [round(ms, 3) for ms in r["step_ms"]] for s, r in rank0.items()},
            "step_cpu_ms": {s: [round(ms, 3) for ms in r["step_cpu_ms"]] for s, r in rank0.items()},
            "measured": {s: {m: [r[s]["measured"][m] for r in results] for m in ("between steps", "peak")}
                         for s in rank0},
            "collectives": {s: sum(n for name, n in r["collectives"].items() if name.startswith("c10d::"))
                            for s, r in rank0.items()},
            "load_average": load.mean()}


def best(kept: dict, key: str) -> dict[str, float]:
    """The least of a kind over all kept runs, per strategy: "step_ms" or "step_cpu_ms" (rank 0's
    fastest step), or "between steps" or "peak" (rank 0's bytes). On a shared
    machine other work only adds time, and a rank's measured memory moves between runs: the least
    is the most repeatable figure."""
    runs = kept["runs"]
    if key in ("step_ms", "step_cpu_ms"):
        return {s: min(min(run[key][s]) for run in runs) for s in runs[0][key]}
    return {s: min(run["measured"][s][key][0] for run in runs) for s in runs[0]["measured"]}


def slower_than_ddp(kept: dict, strategies: tuple = ("fsdp", "fsdp_no_reshard")) -> bool:
    """Whether, in every kept run, each of ``strategies`` has a fastest step slower than DDP's fastest
    step of the same run (rank 0's wall clock)."""
    return all(min(run["step_ms"][s]) > min(run["step_ms"]["ddp"]) for run in kept["runs"] for s in strategies)


def live_run(runs: dict) -> dict:
    """Rank 0's step times from a live ``strategies_on_2(timed_steps=...)`` result ({strategy: [result
    per rank]}), in the kept runs' shape ({"runs": [one run]}), for ``best`` and ``slower_than_ddp``."""
    return {"runs": [{key: {s: ranks[0][key] for s, ranks in runs.items()} for key in ("step_ms", "step_cpu_ms")}]}


def kept_runs() -> dict:
    """The kept runs: {"runs": [record_run() ...], "cpu_count", "torch"}."""
    return json.loads(KEPT_RUNS.read_text())


def main(runs: int = 5) -> int:
    print(json.dumps({"runs": [record_run() for _ in range(runs)], "cpu_count": os.cpu_count(),
                      "torch": torch.__version__}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
