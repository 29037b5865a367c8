"""The benchmark commands run and report what they measured (their speed is not asserted)."""

import pytest

from ddp_lib.bench import BENCHMARKS, launch_cost, run_benchmark
from ddp_lib.bench.stats import time_in_turn
from ddp_lib.cli import main


def test_launch_benchmark_measures_every_launcher_side_by_side():
    result = launch_cost.measure(world_sizes=(1,), repeats=1)
    (row,) = result["rows"]
    assert result["repeats"] == 1 and row["world_size"] == 1
    assert row["mp_spawn_s"] > 0 and row["ddp_lib_s"] > 0 and row["quiet_s"] > 0
    # The ratio is computed from unrounded times; the stored times are rounded to 0.1 ms.
    assert abs(row["ratio"] - row["ddp_lib_s"] / row["mp_spawn_s"]) < 0.01
    notes = launch_cost._notes(result).splitlines()
    assert notes[0] == "launch + init + 4 KiB all_reduce + teardown, median of 1 after 1 warm-up"
    assert notes[1].startswith("world size 1: showing rank 0's output live costs ")


def test_the_launch_goal_is_judged_on_two_ranks():
    rows = [{"world_size": 2, "mp_spawn_s": 4.0, "ddp_lib_s": 0.2, "ratio": 0.05, "quiet_s": 0.19}]
    assert "at most 5% of mp.spawn's: 5.0% (met)" in launch_cost._notes({"rows": rows, "repeats": 5})
    rows[0]["ratio"] = 0.051
    assert "5.1% (missed)" in launch_cost._notes({"rows": rows, "repeats": 5})


def test_sides_are_timed_in_turn_after_a_warm_up_round_that_skips_cold_ones():
    calls = []
    times = time_in_turn({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=2, cold=("b",))
    assert calls == ["a", "a", "b", "a", "b"]
    assert [len(t) for t in times.values()] == [2, 2] and all(s >= 0 for t in times.values() for s in t)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_takes_quick_repeats_and_json(name, capsys):
    with pytest.raises(SystemExit) as done:
        run_benchmark(name, ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m ddp_lib bench {name} ")
    assert all(option in out for option in ("--quick", "--repeats", "--json"))


def test_an_unknown_benchmark_is_bad_input(capsys):
    assert main(["bench", "warp-speed"]) == 2
    expected = ("unknown benchmark 'warp-speed'; "
                "accepted: allreduce, buckets, ddp, launch, overlap, pinned, ring, scaling, startup, wide")
    assert expected in capsys.readouterr().err


def test_fit_verdict_fits_where_the_model_holds_and_names_the_hump():
    from ddp_lib.bench import allreduce
    result = allreduce.full_run()
    alpha, beta = allreduce.held_fit(result, 2)
    start = allreduce.fit_start(result, 2)
    assert start == 4  # the kept run, sizes in random order: no clear fall, so the fit takes every size
    assert "fitted from 4 B (every size: the medians never clearly fall)" in allreduce.fit_verdict(result)
    rows = [r for r in result["rows"] if r["world_size"] == 2 and r["bytes"] >= start]
    errors = [abs((alpha + r["bytes"] / beta) / (r["time_us"] * 1e-6) - 1) for r in rows]
    assert sorted(errors)[len(errors) // 2] < 0.25  # the median size fits within 25%
    assert len(allreduce.fit_verdict(result).splitlines()) == 3
    # the sign said in words: the kept 4 B took 200 us, the model says 290 us
    assert "furthest at 4 B: the model is 45% above the measured time" in allreduce.fit_verdict(result)
    assert "alpha = " in allreduce.fit_verdict(result) and "gloo" not in allreduce.fit_verdict(result)
    text = allreduce.fit_verdict(result, detail=True)
    assert text.startswith("no size below the fit: it starts at the smallest, 4 B")
    assert "8 messages (4 per rank)" in text and "the same at every size: True" in text
    assert text.endswith("the smaller sizes took longer: False")
    assert allreduce.loops_per_timing(16) == 20 and allreduce.loops_per_timing(64 << 20) == 1
    # An earlier kept run, sizes timed one after another: 16 B to 4 KiB took longer than 16 KiB.
    sizes = [4 ** k for k in range(1, 14)]
    medians = [180, 1504, 1366, 1436, 600, 1120, 324, 428, 368, 575, 2337, 10424, 39908]
    quartiles = [(162, 340), (1189, 2113), (1208, 1788), (784, 1960), (509, 1239), (452, 1405), (291, 811),
                 (423, 671), (362, 379), (563, 625), (1932, 3790), (9486, 11386), (39222, 45496)]
    hump = {"rows": [{"world_size": 2, "bytes": b, "time_us": t, "q1_us": q1, "q3_us": q3}
                     for b, t, (q1, q3) in zip(sizes, medians, quartiles)]}
    assert allreduce.fit_start(hump) == 16 * 1024
    assert "fitted from 16 KiB (where the medians stop falling)" in allreduce.fit_verdict(hump)
    text = allreduce.fit_verdict(hump, detail=True)
    assert text.startswith("below 16 KiB: 4 B to 4 KiB took 180-1504 us")
    assert "the smaller sizes took longer: True; the same messages, so not gloo's algorithm" in text


def test_fit_start_is_where_the_medians_stop_falling():
    from ddp_lib.bench import allreduce

    def run(times_us):
        return {"rows": [{"world_size": 2, "bytes": 4 ** k, "time_us": t} for k, t in enumerate(times_us, 1)]}
    assert allreduce.fit_start(run([10, 20, 30, 40])) == 4  # never falls: the fit takes every size
    assert allreduce.fit_start(run([90, 80, 10, 20, 30])) == 64  # 16 B and 4 B took longer than 64 B
    assert allreduce.fit_start(run([10, 20, 18, 30])) == 4  # a fall of 10% is within the tolerance
    assert allreduce.fit_start(run([10, 20, 18, 30]), tolerance=0) == 64
    assert allreduce.held_fit(run([90, 80, 10, 20, 30])) == allreduce.held_fit(run([90, 80, 10, 20, 30]), from_bytes=64)
    # where the rows have middle halves, a fall counts only when they are apart
    overlapping = run([10, 40, 20, 50])
    for row, (q1, q3) in zip(overlapping["rows"], [(9, 11), (18, 60), (15, 30), (45, 55)]):
        row.update(q1_us=q1, q3_us=q3)
    assert allreduce.fit_start(overlapping) == 4  # 64 B's third quartile (30) above 16 B's first (18)
    overlapping["rows"][2].update(q3_us=17)
    assert allreduce.fit_start(overlapping) == 64  # now apart: 16 B took longer than 64 B


def test_the_lesson_verdicts_read_the_kept_runs():
    from ddp_lib.bench import allreduce, ddp, overlap, scaling, wide
    alpha, beta = allreduce.held_fit(allreduce.full_run())
    text = ddp.model_verdict(ddp.full_run(), alpha, beta)
    # the kept run: DDP's extra 2-rank time is further from both than 25%, a rest of it unexplained
    assert len(text.splitlines()) == 3 and "the fit within 25%: False" in text
    assert "the parts add up within 25%: False" in text
    text = ddp.model_verdict(ddp.full_run(), alpha, beta, sweep=allreduce.full_run())
    assert len(text.splitlines()) == 4 and "x the all-reduce benchmark's" in text
    assert text.endswith("at that size, interpolated between its rows")
    assert "largest:" in ddp.model_verdict(ddp.full_run(), alpha, beta, detail=True)
    profiled = overlap.full_run()
    assert "steps with some overlap, of all" in overlap.overlap_verdict(profiled)
    assert set(overlap.parts_ms(profiled)) == {f"bucket_cap_mb={profiled['bucket_cap_mb']:g}",
                                               f"bucket_cap_mb={profiled['one_bucket_cap_mb']:g}"}
    step_lines = overlap.step_verdict(profiled).splitlines()
    assert step_lines[0] == overlap.step_sentence(profiled) and "p = " not in overlap.step_verdict(profiled)
    assert step_lines[0].startswith("4 small buckets: step ")
    # the kept profile: one bucket was shorter in 16 of 21 rounds, the 16 a verdict needs with 2 tests
    assert step_lines[0].endswith("a verdict needs 16 (2 tests: the question asked both ways): "
                                  "small buckets made the step longer.")
    assert overlap.paired_verdict(profiled, "step").endswith("a verdict needs 16")
    assert overlap.paired_verdict(profiled, "step").startswith("higher: ")
    cost = overlap.bucket_cost_verdict(profiled, alpha)
    assert cost.startswith("under the profiler: 4 buckets took ") and "Each extra bucket cost about" in cost
    assert "times the fitted alpha of" in cost and "p = " not in cost
    assert wide.verdict(wide.full_run(), cut=True).count("a verdict needs") == 3
    assert "a verdict needs" not in wide.verdict(wide.full_run())
    lines = scaling.verdict(scaling.full_run()).splitlines()
    assert lines[0].startswith("2 ranks: ") and "oversubscribed" in lines[1]
    assert all(line.endswith((": more", ": fewer", ": undecided")) for line in lines[:2])


def test_scaling_verdict_judges_the_rounds_both_ways():
    from ddp_lib.bench import scaling

    def run(two, four):
        return {"cpu_count": 2, "load_average": 1.0, "rows": [
            {"world_size": ws, "policy": "one", "speedup": 1.0, "rounds_samples_per_s": rounds}
            for ws, rounds in ((1, [100.0] * 9), (2, two), (4, four))]}
    lines = scaling.verdict(run([50.0] * 9, [150.0] * 9), cut=True).splitlines()
    assert lines[0].endswith("more samples/s than 1 rank in 0 of 9 rounds, fewer in 9; a verdict needs 9; so: fewer")
    assert lines[1].endswith("in 9 of 9 rounds, fewer in 0; a verdict needs 9; so: more")
    assert scaling.verdict(run([50.0] * 9, [150.0] * 9)).splitlines()[0].endswith("fewer in 9; so: fewer")
    assert scaling.verdict(run([50.0, 150.0] * 4 + [50.0], [100.0] * 9)).splitlines()[0].endswith(": undecided")
    assert lines[-1] == "load average 1.0 while it ran"
    raised = {**run([50.0] * 9, [150.0] * 9), "niceness": -19}
    assert scaling.verdict(raised).splitlines()[-1] == (
        "load average 1.0 while it ran, the ranks given priority over other programs (as root): the other programs "
        "counted in the load got little of the cores")


def test_extra_step_sets_the_2_rank_step_beside_measured_all_reduces_and_alpha():
    from ddp_lib.bench import allreduce, scaling
    from ddp_lib.workers.train import MoonsNet
    assert scaling.gradient_bytes() == 4 * sum(p.numel() for p in MoonsNet().parameters())
    # Made-up runs: 1 rank 16 samples per ms (a 1 ms step), 2 ranks 16 per ms (a 2 ms step: 1 ms extra).
    runs = {"rows": [{"world_size": 1, "policy": "one", "samples_per_s": 16000.0},
                     {"world_size": 2, "policy": "one", "samples_per_s": 16000.0}]}
    nbytes = scaling.gradient_bytes()
    below, above = 4 ** (nbytes.bit_length() // 2 - 1), 4 ** ((nbytes.bit_length() + 1) // 2)
    assert below <= nbytes <= above
    kept = {"rows": [{"world_size": 2, "bytes": below, "time_us": 1000.0},
                     {"world_size": 2, "bytes": above, "time_us": 500.0},
                     {"world_size": 4, "bytes": below, "time_us": 9.0}]}
    lines = scaling.extra_step(runs, kept, alpha=250e-6).splitlines()
    assert lines[0].startswith(f"gradients {nbytes} B;") and "took 1.00 ms" in lines[0] and "0.50 ms" in lines[0]
    assert "= local step 1.00 ms + 1.00 ms: 1.0 to 2.0 of those measured all-reduces, 4.0 fitted alpha" in lines[1]
    assert lines[2] == "prediction 2t / (t + alpha): 1.60x; measured 1.00x; within 10%: False"
    assert lines[3].endswith("1.00x to 1.33x with alpha replaced by a measured small all-reduce")
    assert "True" not in lines[3]
    # The one prediction holds when the 2-rank step adds about one fitted alpha (a 1.25 ms step: 1.60x).
    near = {"rows": [runs["rows"][0], {"world_size": 2, "policy": "one", "samples_per_s": 25600.0}]}
    assert scaling.extra_step(near, kept, alpha=250e-6).splitlines()[2].endswith("within 10%: True")
    alpha, _ = allreduce.held_fit(allreduce.full_run())
    assert len(scaling.extra_step(scaling.full_run(), allreduce.full_run(), alpha).splitlines()) == 4


def test_prediction_returns_the_estimate_and_the_measured_speed_up():
    from ddp_lib.bench import scaling
    # 1 rank 16 samples per ms (a 1 ms step), 2 ranks 25.6 per ms: 2 * 1 / (1 + 0.25) = 1.6x predicted.
    runs = {"rows": [{"world_size": 1, "policy": "one", "samples_per_s": 16000.0},
                     {"world_size": 2, "policy": "one", "samples_per_s": 25600.0}]}
    predicted, measured = scaling.prediction(runs, alpha=250e-6)
    assert abs(predicted - 1.6) < 1e-9 and abs(measured - 1.6) < 1e-9


def _made_up_profile(small_steps_ms, one_steps_ms):
    """A profile of made-up paired rounds: only the whole step's time, and one all-reduce bar per bucket."""
    bar = {"lane": "all-reduce"}
    return {"bucket_cap_mb": 1.0, "one_bucket_cap_mb": 25.0, "rows": [bar] * 4, "one_bucket": [bar],
            "steps": {"1": [{"step": t} for t in small_steps_ms], "25": [{"step": t} for t in one_steps_ms]}}


def test_step_sentence_says_the_cost_and_the_rounds_plainly():
    from ddp_lib.bench import overlap
    rounds = 21
    cut = "a verdict needs 16 (2 tests: the question asked both ways): "
    longer = _made_up_profile([20.0] * rounds, [10.0] * rounds)
    assert overlap.step_sentence(longer) == ("4 small buckets: step 20.0 ms; one bucket: step 10.0 ms (medians). "
                                             "One bucket gave the shorter step in 21 of 21 paired rounds; "
                                             "a verdict needs 16 (2 tests: the question asked both ways): "
                                             "small buckets made the step longer.")
    shorter = _made_up_profile([9.0] * rounds, [10.0] * rounds)
    assert overlap.step_sentence(shorter).endswith("Small buckets gave the shorter step in 21 of 21 paired rounds; "
                                                   f"{cut}small buckets made the step shorter.")
    mixed = _made_up_profile([9.0] * 11 + [11.0] * 10, [10.0] * rounds)
    assert overlap.step_sentence(mixed).endswith(f"in 11 of 21 paired rounds; {cut}"
                                                 "too few rounds to say which is shorter.")
    assert overlap.bucket_cost_verdict(longer, alpha=1e-3) == (
        "under the profiler: 4 buckets took 20.0 ms a step, 1 bucket 10.0 ms (medians). "
        "Each extra bucket cost about 3.3 ms, 3.3 times the fitted alpha of 1.00 ms.")


def test_interpolated_us_reads_between_the_measured_sizes():
    from ddp_lib.bench import ddp
    rows = [{"world_size": 2, "bytes": 1000, "time_us": 100.0}, {"world_size": 2, "bytes": 3000, "time_us": 300.0},
            {"world_size": 4, "bytes": 2000, "time_us": 9999.0}]
    assert ddp.interpolated_us(rows, 2000) == 200.0 and ddp.interpolated_us(rows, 1000) == 100.0
    with pytest.raises(ValueError):
        ddp.interpolated_us(rows, 5000)


def test_scaling_takes_a_round_again_when_a_long_run_was_no_longer_than_the_short(monkeypatch):
    from ddp_lib.bench import scaling

    # Every run takes 0.1 s per epoch, but for the third call: the warm-up round's 2-rank long run, which
    # takes less than its short run, so that round is taken again whole.
    calls = []

    def fake_run(world_size, epochs, threads):
        calls.append((world_size, epochs))
        return 0.05 if len(calls) == 3 else 0.1 * epochs
    monkeypatch.setattr(scaling, "_run", fake_run)
    result = scaling.measure(quick=True, repeats=1, world_sizes=(1, 2), epochs=(1, 8))
    assert len(calls) == 12  # the warm-up round twice (8 runs), round 1 (4 runs)
    assert all(r["rounds_samples_per_s"] == [r["samples_per_s"]] and r["samples_per_s"] > 0 for r in result["rows"])

    def never_longer(world_size, epochs, threads):
        return 1.0
    monkeypatch.setattr(scaling, "_run", never_longer)
    with pytest.raises(RuntimeError, match="took no longer than a 1-epoch one three times"):
        scaling.measure(quick=True, repeats=1, world_sizes=(1, 2), epochs=(1, 8))
