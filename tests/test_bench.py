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
