"""Lesson 10's kept step times: three runs of every strategy, each with the load sampled while it ran."""

import time

from ddp_lib.demos.fsdp_step_times import STRATEGIES, LoadSampler, kept_runs


def test_kept_runs_hold_every_strategy_and_a_load():
    kept = kept_runs()
    assert len(kept["runs"]) == 3 and kept["cpu_count"] >= 1
    for run in kept["runs"]:
        assert sorted(run["step_ms"]) == sorted(STRATEGIES.split(","))
        assert all(len(times) == 21 for times in run["step_ms"].values())
        assert run["collectives"]["ddp"] == 1 and run["load_average"] >= 0


def test_load_sampler_samples_while_the_block_runs():
    with LoadSampler(every_s=0.05) as load:
        time.sleep(0.2)
    assert len(load.samples) >= 2
    assert load.mean() >= 0
