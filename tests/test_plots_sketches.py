"""The schematics lessons 06 and 07 draw before their runs: what each one says is drawn from its arguments."""

import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.failure_sketches import plot_dead_rank, plot_loop_collision, plot_mismatched_shapes  # noqa: E402
from ddp_lib.plots.torchrun import plot_log_dir_tree, plot_port_choice  # noqa: E402


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_the_mismatched_shapes_sketch_sums_only_the_paired_numbers():
    shown = texts(plot_mismatched_shapes([1.0, 2.0], [10.0, 20.0, 30.0]))
    assert "rank 0 gets [11, 22] and carries on: no error" in shown
    assert "no partner" in shown
    assert "rank 0 gets [4] and carries on: no error" in texts(plot_mismatched_shapes([1.0], [3.0, 5.0]))


def test_the_dead_rank_sketch_has_one_lane_per_rank_and_one_killed_rank():
    fig = plot_dead_rank(world_size=4)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 3", "rank 2", "rank 1", "rank 0"]
    assert texts(fig).count("SIGKILL: gone, no exception") == 1


def test_the_collision_and_port_sketches_name_what_goes_wrong():
    assert "paired as the same collective" in texts(plot_loop_collision())
    assert "address already in use" in texts(plot_port_choice())


def test_the_log_dir_tree_nests_attempts_in_the_run_folder_and_ranks_in_attempts():
    shown = texts(plot_log_dir_tree())
    names = ("<log-dir>/", "<rdzv-id>_<random>/", "attempt_0/", "0/", "error.json", "attempt_1/")
    order = [shown.index(name) for name in names]
    assert order == sorted(order)
