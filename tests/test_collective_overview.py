"""Lesson 01's sketch of the eight collectives: one panel each, and each sketch agrees with what the
collective does on 4 ranks (who ends with a sum, with scratch, or with nothing)."""

import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.collective_overview import SKETCHES, WORLD, plot_eight_collectives  # noqa: E402
from ddp_lib.plots.collectives import SUMMING  # noqa: E402


def test_one_panel_per_collective():
    fig = plot_eight_collectives()
    titles = [ax.get_title().split("\n")[0] for ax in fig.axes]
    assert titles == list(SKETCHES)
    assert set(SUMMING) <= set(SKETCHES)


def test_sketches_follow_the_collectives():
    for name, (before, after, _) in SKETCHES.items():
        assert len(before) == len(after) == WORLD, name
        sums = {rank for rank, row in enumerate(after) if any(origin == "sum" for origin, _ in row)}
        assert bool(sums) == (name in SUMMING), name
    assert [len(row) for row in SKETCHES["gather"][1]] == [WORLD, 0, 0, 0]
    assert all(origin == "scratch" for row in SKETCHES["reduce"][1][1:] for origin, _ in row)
