"""Lesson 10's kept runs: five runs of every strategy, each with the load sampled while it ran, the
step times (wall clock and the main thread's CPU time) and the memory the profiler measured."""

import time
from pathlib import Path

from ddp_lib.demos.fsdp_step_times import (
    KEPT_RUNS,
    KEPT_RUNS_NAME,
    STRATEGIES,
    LoadSampler,
    best,
    kept_runs,
    live_run,
    slower_than_ddp,
)

ROOT = Path(__file__).resolve().parent.parent


def test_kept_runs_hold_every_strategy_and_a_load():
    kept = kept_runs()
    assert len(kept["runs"]) == 5 and kept["cpu_count"] >= 1
    names = sorted(STRATEGIES.split(","))
    for run in kept["runs"]:
        for key in ("step_ms", "step_cpu_ms"):
            assert sorted(run[key]) == names
            assert all(len(times) == 21 and min(times) > 0 for times in run[key].values())
        assert sorted(run["measured"]) == names
        assert all(len(m["between steps"]) == len(m["peak"]) == 2 for m in run["measured"].values())
        assert run["collectives"]["ddp"] == 1 and run["load_average"] >= 0


def test_best_takes_the_least_over_the_runs():
    kept = {"runs": [{"step_ms": {"ddp": [3.0, 2.0]}, "measured": {"ddp": {"peak": [7, 5]}}},
                     {"step_ms": {"ddp": [1.5, 4.0]}, "measured": {"ddp": {"peak": [6, 1]}}}]}
    assert best(kept, "step_ms") == {"ddp": 1.5}
    assert best(kept, "peak") == {"ddp": 6}  # rank 0's


def test_load_sampler_samples_while_the_block_runs():
    with LoadSampler(every_s=0.05) as load:
        time.sleep(0.2)
    assert len(load.samples) >= 2
    assert load.mean() >= 0


def test_slower_than_ddp_asks_every_run():
    kept = {"runs": [{"step_ms": {"ddp": [2.0, 3.0], "fsdp": [5.0, 2.5]}},
                     {"step_ms": {"ddp": [1.0], "fsdp": [1.5]}}]}
    assert slower_than_ddp(kept, ("fsdp",))
    kept["runs"][1]["step_ms"]["fsdp"] = [0.9]  # one run where FSDP2's fastest step beats DDP's
    assert not slower_than_ddp(kept, ("fsdp",))
    assert slower_than_ddp(kept_runs())  # the kept runs: FSDP2, either setting, slower in every run


def test_the_printed_name_is_the_kept_runs_file():
    assert (ROOT / KEPT_RUNS_NAME).resolve() == KEPT_RUNS.resolve()


def test_live_run_reads_rank_0s_times_in_the_kept_runs_shape():
    runs2 = {s: [{"step_ms": [ms, ms / 2], "step_cpu_ms": [1.0]}, {"step_ms": [0.1], "step_cpu_ms": [0.1]}]
             for s, ms in (("ddp", 2.0), ("fsdp", 9.0))}
    live = live_run(runs2)
    assert best(live, "step_ms") == {"ddp": 1.0, "fsdp": 4.5}  # rank 0's, not rank 1's
    assert slower_than_ddp(live, ("fsdp",))
