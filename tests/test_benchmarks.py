"""Lesson 08's benchmarks in their smallest form: well-formed rows, the counts that must hold,
the bus-bandwidth formula, the table and JSON output, and the exercise checkers. No timing is
asserted: only that times are positive and that derived figures follow from them."""

import json
import math
import os

import pytest

from ddp_lib.bench import allreduce, buckets, ddp, model, overlap, pinned, ring, scaling, startup, stats, wide
from ddp_lib.bench.report import (
    MACHINE_KEYS,
    algbw_gbs,
    bus_factor,
    busbw_gbs,
    format_table,
    human_bytes,
    machine,
    recorded_machine,
    run_main,
)
from ddp_lib.workers.shared import make_mlp


def assert_machine_recorded(result):
    """A run from now on records torch's version, the cores and the CPU's model beside its rows."""
    import torch
    assert {key: result[key] for key in MACHINE_KEYS} == machine()
    assert result["torch"] == torch.__version__ and result["cpu_count"] >= 1 and result["cpu_model"]


def test_a_kept_run_says_what_it_did_not_record():
    assert recorded_machine({"torch": "2.13.0+cpu", "cpu_count": 2, "cpu_model": "AMD EPYC 7B13"}) == (
        "torch 2.13.0+cpu, 2 cores, CPU AMD EPYC 7B13")
    assert recorded_machine({"cpu_count": 2}) == "torch not recorded, 2 cores, CPU not recorded"
    assert recorded_machine({}) == "torch not recorded, cores not recorded, CPU not recorded"


def test_every_benchmark_records_the_machine_it_ran_on():
    import inspect
    for module in (allreduce, buckets, ddp, overlap, pinned, ring, scaling, startup, wide):
        assert "**machine()" in inspect.getsource(module.measure), module.__name__


def test_busbw_is_algbw_times_two_n_minus_one_over_n():
    assert [bus_factor(n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]
    assert algbw_gbs(2_000_000_000, 2.0) == 1.0
    assert busbw_gbs(2_000_000_000, 2.0, 4) == 1.5


def test_sizes_print_like_nccl_tests():
    assert [human_bytes(n) for n in (4, 1000, 1024, 16 << 20)] == ["4 B", "1000 B", "1 KiB", "16 MiB"]


def test_table_and_json_output(capsys):
    columns = [("n", "ranks", "d"), ("x", "time (us)", ".1f")]
    table = format_table([{"n": 2, "x": 12.345}, {"n": 4, "x": None}], columns)
    assert table.splitlines() == ["ranks  time (us)", "    2       12.3", "    4          -"]

    def fake(quick, repeats):
        return {"rows": [{"n": 2, "x": 1.0}], "quick": quick, "repeats": repeats}
    assert run_main(["--quick", "--json", "--repeats", "3"], "fake", "doc", fake, columns) == 0
    assert json.loads(capsys.readouterr().out) == {"rows": [{"n": 2, "x": 1.0}], "quick": True, "repeats": 3}
    run_main([], "fake", "doc", fake, columns, notes=lambda r: f"repeats {r['repeats']}")
    assert capsys.readouterr().out.splitlines() == ["ranks  time (us)", "    2        1.0", "repeats None"]


def test_allreduce_rows_have_nccl_tests_columns_and_the_limits():
    result = allreduce.measure(repeats=1, world_sizes=(2,), sizes=[4, 4096])
    assert [(r["world_size"], r["bytes"], r["count"], r["type"]) for r in result["rows"]] == [
        (2, 4, 1, "float"), (2, 4096, 1024, "float")]
    for r in result["rows"]:
        assert r["time_us"] > 0 and r["q1_us"] <= r["time_us"] <= r["q3_us"]
        assert math.isclose(r["algbw_gbs"], r["bytes"] / (r["time_us"] * 1e-6) / 1e9, rel_tol=0.05, abs_tol=1e-4)
        assert math.isclose(r["busbw_gbs"], r["algbw_gbs"] * bus_factor(2), abs_tol=1e-4)
    assert result["copy_gbs"] > 0 and result["loopback_gbs"] > 0
    assert result["repeats"] == 1 and [m["world_size"] for m in result["models"]] == [2]
    assert_machine_recorded(result)


def test_every_repeat_of_the_sweep_visits_every_size_in_a_drawn_order():
    from ddp_lib.bench.ranks import size_order
    n = len(allreduce.SIZES)
    orders = [size_order(n, repeat) for repeat in range(allreduce.REPEATS + 1)]
    assert orders[0] == list(range(n))  # the warm-up
    assert all(sorted(order) == list(range(n)) for order in orders)
    assert len({tuple(order) for order in orders[1:]}) == allreduce.REPEATS  # no two repeats alike
    assert orders == [size_order(n, repeat) for repeat in range(allreduce.REPEATS + 1)]  # same on every rank


def test_the_alpha_beta_fit_recovers_a_model_it_was_given():
    sizes = [4**k for k in range(1, 14)]
    alpha, beta = model.fit_alpha_beta(sizes, [model.predict(80e-6, 1.5e9, s) for s in sizes])
    assert math.isclose(alpha, 80e-6, rel_tol=1e-9) and math.isclose(beta, 1.5e9, rel_tol=1e-9)
    assert math.isclose(model.half_bandwidth_bytes(alpha, beta), 120_000, rel_tol=1e-9)


def test_the_per_message_fit_recovers_a_model_it_was_given():
    messages, sent = [1, 4, 4, 12, 12, 12], [4, 64, 4096, 96, 2**20, 2**24]
    seconds = [m * 90e-6 + b / 0.8e9 for m, b in zip(messages, sent)]
    per_message, bandwidth = model.fit_per_message(messages, sent, seconds)
    assert abs(per_message - 90e-6) < 1e-9 and abs(bandwidth / 0.8e9 - 1) < 1e-9


def test_the_kept_full_run_is_whole_and_its_models_follow_from_its_rows():
    full = allreduce.full_run()
    assert {(r["world_size"], r["bytes"]) for r in full["rows"]} == {(n, s) for n in (2, 4) for s in allreduce.SIZES}
    assert full["repeats"] == allreduce.REPEATS and full["copy_gbs"] > 0 and full["loopback_gbs"] > 0
    assert full["models"] == allreduce.fitted_models(full["rows"])


def test_ring_rows_are_ratios_of_both_sides():
    result = ring.measure(repeats=1, world_sizes=(2,), sizes=[16, 4096])
    assert_machine_recorded(result)
    rows = result["rows"]
    assert [r["bytes"] for r in rows] == [16, 4096]
    for r in rows:
        assert r["ring_us"] > 0 and r["all_reduce_us"] > 0
        assert math.isclose(r["ratio"], r["ring_us"] / r["all_reduce_us"], rel_tol=0.02)


def test_ddp_rows_and_all_reduce_counts():
    result = ddp.measure(quick=True, repeats=1)
    assert_machine_recorded(result)
    rows = {(r["world_size"], r["way"]): r for r in result["rows"]}
    assert set(rows) == {(1, "local"), (1, "torch"), (2, "local"), (2, "torch"),
                         (2, "after_backward"), (2, "per_parameter_hooks"), (2, "buckets")}
    # Five Linear layers: ten parameters, one all-reduce each; one 25 MB bucket holds them all.
    assert [rows[2, w]["allreduces"] for w in ("after_backward", "per_parameter_hooks", "buckets")] == [10, 10, 1]
    # torch's reducer all-reduces its one bucket even on one rank, with nobody to add to.
    assert rows[1, "torch"]["allreduces"] == 1 and rows[2, "torch"]["allreduces"] == 1
    assert rows[1, "torch"]["baseline"] == "local" and rows[2, "buckets"]["baseline"] == "torch"
    assert all(r["step_ms"] > 0 for r in rows.values())
    # The bare all-reduce timed beside the steps carries as many bytes as the gradients.
    params = sum(p.numel() for p in make_mlp(0, ddp.DDP_WIDTHS).parameters())
    assert result["gradient_bytes"] == 4 * params and result["all_reduce_ms"] > 0
    # DDP's extra time per round, as a middle half (first quartile, third quartile), on 1 and 2 ranks.
    assert set(result["extra_quartiles_ms"]) == {"1", "2"}
    assert all(q1 <= q3 for q1, q3 in result["extra_quartiles_ms"].values())


def test_overlap_profile_has_the_phases_backward_and_every_bucket_all_reduce():
    result = overlap.measure(quick=True)
    assert_machine_recorded(result)
    lanes = [r["lane"] for r in result["rows"]]
    # bucket_cap_mb=1 on the benchmark MLP: 4 buckets after DDP rebuilds them (lesson 08, exercise 3).
    assert lanes.count("all-reduce") == 4 and lanes.count("backward") >= 10
    assert [r["name"] for r in result["rows"] if r["lane"] == "phase"] == list(overlap.PHASES)
    assert all(0 <= r["start_ms"] <= r["end_ms"] for r in result["rows"])
    assert overlap.backward_end_ms(result) == max(r["end_ms"] for r in result["rows"] if r["lane"] == "backward")
    one_bucket = [r["lane"] for r in result["one_bucket"]]
    assert one_bucket.count("all-reduce") == 1 and one_bucket.count("phase") == len(overlap.PHASES)
    # Every profiled step of each cap is summarised; the kept timeline is the median step's.
    steps = result["steps"]
    assert set(steps) == {"1", "25"} and len(steps["1"]) == len(steps["25"]) == overlap.QUICK_STEPS
    assert sorted(s["step"] for s in steps["1"])[overlap.QUICK_STEPS // 2] == overlap.step_ms(result)
    assert all(s["hidden"] == 0 for s in steps["25"])  # one bucket starts only when backward is done
    # Both ranks' threads during backward: the training thread computed, and gloo's threads ran.
    assert all(s["training cpu"] > 0 and s["gloo cpu"] > 0 and s["training wait"] >= 0
               for cap in steps for s in steps[cap])
    assert 0 <= result["small_first"] <= overlap.QUICK_STEPS  # the order is drawn each round
    # The ranks begin backward within one step of each other: they met at a barrier just before.
    assert all(abs(s["rank skew"]) < s["step"] for cap in steps for s in steps[cap])


def test_the_profiled_rounds_draw_the_same_order_on_every_rank():
    from ddp_lib.launch import run_ranks

    ranks = run_ranks(overlap.profile_ddp_steps, 2, args=((1.0, 25.0), 9), show_output=False,
                      env={"OMP_NUM_THREADS": "1"})
    assert ranks[0]["first"] == ranks[1]["first"] and set(ranks[0]["first"]) == {1.0, 25.0}


def test_the_step_breakdown_splits_backward_at_its_last_operator():
    rows = [{"lane": "phase", "name": "zero_grad", "start_ms": 0.0, "end_ms": 1.0},
            {"lane": "phase", "name": "forward", "start_ms": 1.0, "end_ms": 4.0},
            {"lane": "phase", "name": "backward", "start_ms": 4.0, "end_ms": 15.0},
            {"lane": "backward", "name": "AddmmBackward0", "start_ms": 4.5, "end_ms": 11.0},
            {"lane": "all-reduce", "name": "gloo:all_reduce", "start_ms": 9.0, "end_ms": 12.0},
            {"lane": "all-reduce", "name": "gloo:all_reduce", "start_ms": 11.5, "end_ms": 14.5},
            {"lane": "phase", "name": "optimizer", "start_ms": 15.0, "end_ms": 17.0}]
    parts = overlap.breakdown({"rows": rows})
    assert parts == {"forward": 4.0, "backward computation": 7.0, "communication not hidden": 4.0, "optimizer": 2.0}
    assert overlap.step_ms({"rows": rows}) == 17.0 == sum(parts.values())
    assert overlap.communication_ms({"rows": rows}) == 5.5 and overlap.overlapped_ms({"rows": rows}) == 2.0
    # A last operator whose record spans the wait: the computation ends when the last bucket starts.
    rows[3] = {"lane": "backward", "name": "torch::autograd::AccumulateGrad", "start_ms": 4.5, "end_ms": 14.6}
    assert overlap.breakdown({"rows": rows})["backward computation"] == 7.5
    assert overlap.overlapped_ms({"rows": rows}) == 2.5


def test_overlapped_time_counts_only_all_reduce_time_before_backward_ends():
    rows = [{"lane": "backward", "start_ms": 0.0, "end_ms": 10.0},
            {"lane": "all-reduce", "start_ms": 4.0, "end_ms": 8.0},
            {"lane": "all-reduce", "start_ms": 6.0, "end_ms": 12.0},  # overlaps the first: 8 to 10 counts
            {"lane": "all-reduce", "start_ms": 11.0, "end_ms": 13.0}]  # after backward: nothing
    assert overlap.overlapped_ms({"rows": rows}) == 6.0


def test_bucket_sweep_counts_fewer_all_reduces_for_bigger_buckets():
    result = buckets.measure(quick=True, repeats=1)
    assert_machine_recorded(result)
    rows = result["rows"]
    assert [r["bucket_cap_mb"] for r in rows] == buckets.QUICK_CAPS_MB
    by_cap = {r["bucket_cap_mb"]: r for r in rows}
    counts = [r["allreduces"] for r in rows if r["bucket_cap_mb"] is not None]
    assert counts == sorted(counts, reverse=True) and counts == [5, 4, 1]
    # Left out, bucket_cap_mb is 25 MiB with a first bucket of at most 1 MiB: two buckets here.
    assert by_cap[None]["allreduces"] == 2 and by_cap[None]["label"] == "default"
    assert by_cap[25.0]["ratio"] == 1.0
    # DDP's first step sends one bucket of every gradient; it rebuilds its buckets before the second.
    whole = sum(by_cap[25.0]["bucket_bytes"])
    assert all(r["first_step_allreduces"] == 1 and r["first_step_bucket_bytes"] == [whole] for r in rows)
    assert by_cap[None]["bucket_bytes"][0] >= 2**20 > by_cap[None]["bucket_bytes"][0] - 4 * 512 * 512
    assert all(sum(r["bucket_bytes"]) == whole and len(r["bucket_bytes"]) == r["allreduces"] for r in rows)
    verdict = buckets.bucket_verdict({"rows": rows})
    assert "step 1 sent one bucket whatever the cap: True" in verdict and "and closed: True" in verdict
    assert all(len(r["rounds_ms"]) == 1 and r["step_ms"] == r["rounds_ms"][0] for r in rows)


def _bucket_rounds(rounds_ms: dict[str, list[float]]) -> dict:
    return {"rows": [{"label": label, "rounds_ms": ms} for label, ms in rounds_ms.items()], "load_average": 1.0}


def test_bucket_timed_verdict_names_the_shorter_side_or_undecided():
    default = [10.0] * 20
    result = _bucket_rounds({"0.01": [12.0] * 20, "2": [9.0] * 20, "25": [9.0, 11.0] * 10, "default": default})
    lines = buckets.timed_verdict(result, cut=True).splitlines()
    assert buckets.timed_verdict(result).splitlines() == lines[1:]  # without the cut's line
    # 3 caps, each judged both ways: 6 tests; 20 rounds of 20 is far past the cut, 10 of 20 is not.
    assert lines[0].startswith("6 tests: a side counts as shorter in at least ")
    assert lines[1].endswith("the default in 20; shorter: default")
    assert lines[2].endswith("shorter in 20 of 20 rounds, the default in 0; shorter: cap 2")
    assert lines[3].endswith("shorter in 10 of 20 rounds, the default in 10; shorter: undecided")
    assert lines[4] == "load average 1.0 while it ran"


def test_kept_bucket_run_judges_every_cap_against_the_default():
    kept = buckets.full_run()
    assert all(kept[key] for key in MACHINE_KEYS)  # recorded on some machine: not necessarily this one
    assert [r["label"] for r in kept["rows"]][-1] == "default"
    assert all(len(r["rounds_ms"]) == kept["repeats"] for r in kept["rows"])
    assert len(buckets.timed_verdict(kept, cut=True).splitlines()) == len(kept["rows"]) + 1


def test_startup_rows_name_each_launcher():
    assert set(startup.methods()) >= {"ddp_lib", "mp spawn", "mp forkserver"}
    result = startup.measure(repeats=1, world_sizes=(2,), names=("mp fork",))
    assert_machine_recorded(result)
    rows = result["rows"]
    assert [r["method"] for r in rows] == ["ddp_lib", "mp fork"]
    assert all(r["seconds"] > 0 for r in rows) and rows[0]["ratio"] == 1.0


def test_scaling_rows_per_world_size():
    result = scaling.measure(quick=True, repeats=1, world_sizes=(1, 2), epochs=(1, 2))
    assert_machine_recorded(result)
    rows = result["rows"]
    assert [(r["world_size"], r["policy"], r["threads_per_rank"]) for r in rows] == [(1, "one", 1), (2, "one", 1)]
    assert rows[0]["speedup"] == 1.0 and all(r["samples_per_s"] > 0 for r in rows)


def test_the_kept_scaling_run_says_on_how_many_cores_and_under_what_load():
    full = scaling.full_run()
    assert [(r["world_size"], r["policy"]) for r in full["rows"]] == [
        (n, policy) for policy in scaling.POLICIES for n in (1, 2, 4)]
    assert full["cpu_count"] >= 1 and full["load_average"] >= 0
    assert all(r["samples_per_s"] > 0 for r in full["rows"])


def test_the_kept_ring_run_is_whole_and_its_ratios_follow_from_its_times():
    full = ring.full_run()
    assert {(r["world_size"], r["bytes"]) for r in full["rows"]} == {(n, s) for n in (2, 4) for s in allreduce.SIZES}
    assert full["cpu_count"] >= 1 and full["load_average"] >= 0 and full["repeats"] >= 5
    for r in full["rows"]:
        assert math.isclose(r["ratio"], r["ring_us"] / r["all_reduce_us"], rel_tol=0.02)


def test_the_kept_startup_run_has_every_launcher_on_two_and_four_ranks():
    full = startup.full_run()
    assert {(r["world_size"], r["method"]) for r in full["rows"]} == {
        (n, m) for n in (2, 4) for m in ("ddp_lib", "mp spawn", "mp forkserver", "mp fork")}
    assert full["cpu_count"] >= 1 and full["load_average"] >= 0 and full["repeats"] >= 5
    assert all(r["seconds"] > 0 for r in full["rows"])


def test_the_plain_torch_timer_hands_every_rank_the_slowest_time():
    import ddp_lib.mp
    from ddp_lib.demos.timing import time_allreduce
    from ddp_lib.process_group import free_port

    sizes = [4, 4096]
    per_rank = ddp_lib.mp.labelled_spawn(time_allreduce, args=(2, free_port(), sizes), nprocs=2, join=True)
    assert [nbytes for nbytes, _ in per_rank[0]] == sizes
    assert all(seconds > 0 for _, seconds in per_rank[0])
    assert per_rank[0] == per_rank[1]  # the MAX all-reduce gives both ranks the same time


def test_the_timer_runs_under_torchs_own_mp_spawn_through_a_queue():
    import torch.multiprocessing as mp

    from ddp_lib.demos.spawning import tolerate_abort_at_exit
    from ddp_lib.demos.timing import time_allreduce_to_queue
    from ddp_lib.process_group import free_port

    sizes = [4, 4096]
    results = mp.get_context("spawn").SimpleQueue()
    with tolerate_abort_at_exit():
        mp.spawn(time_allreduce_to_queue, args=(2, free_port(), sizes, results), nprocs=2, join=True)
    by_rank = dict(results.get() for _ in range(2))
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1]
    assert [nbytes for nbytes, _ in by_rank[0]] == sizes and all(seconds > 0 for _, seconds in by_rank[0])



def test_tolerate_abort_at_exit_raises_any_other_failure():
    import torch.multiprocessing as mp

    from ddp_lib.demos.spawning import tolerate_abort_at_exit

    with pytest.raises(mp.ProcessExitedException) as caught, tolerate_abort_at_exit():
        mp.spawn(os._exit, args=(), nprocs=2, join=True)  # rank 1 runs os._exit(1): exit code 1, no signal
    assert caught.value.exit_code == 1 and caught.value.signal_name is None

def test_a_difference_is_called_only_when_the_middle_halves_do_not_overlap():
    assert stats.compare((2.0, 1.0, 3.0), (6.0, 5.0, 7.0)) == "lower"
    assert stats.compare((6.0, 5.0, 7.0), (2.0, 1.0, 3.0)) == "higher"
    assert stats.compare((2.0, 1.0, 5.5), (6.0, 5.0, 7.0)) == "undecided"


def test_the_kept_overlap_run_summarises_every_step_of_both_caps():
    kept = overlap.full_run()
    steps = kept["steps"]
    assert len(steps["1"]) == len(steps["25"]) == overlap.PROFILED_STEPS
    assert all(step["hidden"] == 0 for step in steps["25"])
    median_step = sorted(step["step"] for step in steps["1"])[overlap.PROFILED_STEPS // 2]
    assert median_step == round(overlap.step_ms(kept), 3)
    low, high = overlap.spread(kept, 1, "communication not hidden")[1:]
    assert low <= high
    assert 0 < kept["small_first"] < overlap.PROFILED_STEPS  # neither cap always went first
    assert all({"training cpu", "training wait", "gloo cpu", "rank skew"} <= set(step)
               for step in steps["1"] + steps["25"])


def test_pinning_reaches_every_thread_of_the_process():
    import os
    import threading

    everywhere = os.sched_getaffinity(0)
    ready, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (ready.set(), release.wait()))
    worker.start()
    ready.wait()
    try:
        pinned.pin({min(everywhere)})
        assert os.sched_getaffinity(worker.native_id) == {min(everywhere)}
    finally:
        pinned.pin(everywhere)
        release.set()
        worker.join()


def test_the_kept_pinned_run_has_both_placements_and_messages_from_gloos_ring():
    kept = pinned.full_run()
    assert {(r["bytes"], r["placement"]) for r in kept["rows"]} == \
        {(b, p) for b in pinned.SIZES for p in pinned.PLACEMENTS}
    assert pinned.messages_per_rank(4, 2) == 1 and pinned.messages_per_rank(64, 2) == 4
    assert pinned.messages_per_rank(64, 4) == 12
    assert all(r["quartiles_us"][0] <= r["time_us"] <= r["quartiles_us"][1] for r in kept["rows"])


def test_a_sign_test_calls_a_way_shorter_only_past_chance():
    assert wide.sign_test_wins(15) == 12  # 12 of 15 by chance: 576 / 32768, under 5%; 11 of 15: 5.9%
    assert wide.sign_test_wins(4) == 5  # 4 rounds can never reach 5%: no verdict
    assert wide.sign_test_p(12, 15) == 576 / 32768
    assert wide.sign_test_wins(15, tests=3) == 13  # 12 of 15 (1.76%) misses 5% / 3; 13 of 15: 0.37%
    assert wide.sign_test_wins(15, tests=4) == 13


def test_the_kept_wide_run_pairs_its_ways_round_by_round():
    kept = wide.full_run()
    assert [r["way"] for r in kept["rows"]] == list(wide.WAYS)
    assert all(len(r["rounds_ms"]) == kept["repeats"] for r in kept["rows"])
    assert kept["rows"][0]["speedup"] == 1.0 and kept["cpu_count"] >= 1
    assert "one process, 2 threads" in wide.WAYS  # the one-process baseline may use both cores too


def test_the_wide_steps_add_up_every_ranks_cpu_time():
    from ddp_lib.launch import run_ranks

    result = run_ranks(wide.wide_steps, 2, args=(1,), show_output=False, env={"OMP_NUM_THREADS": "1"})[0]
    assert set(result) == {"step", "cpu"} and all(len(result["cpu"][way]) == 1 for way in wide.WAYS)
    # The DDP ways compute on both ranks: their CPU time, added up, exceeds one rank's wall time here.
    assert all(result["cpu"][way][0] > 0 for way in wide.WAYS)


def test_the_plan_reproduces_the_lessons_worked_gpu_plan():
    from ddp_lib.bench.plan import format_plan, plan
    # 1 billion float32 parameters on 8 GPUs: 4 GB, a 1 MiB first bucket then 25 MiB ones.
    p = plan(params=1_000_000_000, n=8, alpha=20e-6, busbw=150e9, backward_ms=30)
    assert p["gradient_bytes"] == 4_000_000_000 and p["buckets"] == 154
    assert math.isclose(p["beta"], 150e9 * 8 / 14)
    assert math.isclose(p["comm_ms"], 154 * 20e-3 + 4e9 / p["beta"] * 1e3)
    assert round(p["speedup"], 1) == 3.0 and p["ratio"] > 1
    assert round(plan(1_000_000_000, 8, 20e-6, 150e9, 300)["ratio"], 2) == 0.17
    assert "154 buckets" in format_plan(p) and "bound by communication" in format_plan(p)
    assert "DDP adds about 17% to the backward" in format_plan(plan(1_000_000_000, 8, 20e-6, 150e9, 300))
    # A model smaller than the first bucket still sends one bucket.
    assert plan(1000, 2, 1e-4, 1e9, 5)["buckets"] == 1
    for bad in ({"n": 1}, {"busbw": 0}, {"backward_ms": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            plan(**{"params": 10, "n": 2, "alpha": 1e-5, "busbw": 1e9, "backward_ms": 1, **bad})


def test_spread_text_writes_the_median_then_the_quartiles():
    assert overlap.spread_text((4.25, 3.0, 5.5)) == "  4.2 ms [3.0-5.5]"
