"""The benchmark commands run and report what they measured (their speed is not asserted)."""

from ddp_lib.bench import launch as launch_bench
from ddp_lib.cli import main


def test_launch_benchmark_measures_both_launchers_side_by_side():
    (row,) = launch_bench.measure(world_sizes=(1,), repeats=1)
    assert row["world_size"] == 1 and row["mp_spawn_s"] > 0 and row["ddp_lib_s"] > 0
    # The ratio is computed from unrounded times; the stored times are rounded to 0.1 ms.
    assert abs(row["ratio"] - row["ddp_lib_s"] / row["mp_spawn_s"]) < 0.01


def test_an_unknown_benchmark_is_bad_input(capsys):
    assert main(["bench", "warp-speed"]) == 2
    expected = "unknown benchmark 'warp-speed'; accepted: allreduce, buckets, ddp, launch, ring, scaling, startup"
    assert expected in capsys.readouterr().err
