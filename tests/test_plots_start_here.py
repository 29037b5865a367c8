"""Lesson 00's schematics draw what their titles promise: one box per rank, the port, both collectives."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from ddp_lib.plots.start_here import (
    plot_busy_port,
    plot_ddp_collectives,
    plot_device_ids_move,
    plot_file_store,
    plot_gradient_average,
    plot_job_map,
    plot_live_ranks,
    plot_pickle_by_name,
)


def texts(fig) -> str:
    """Every text drawn on the figure, its axes' and its own, one per line."""
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts) + "\n" + "\n".join(
        t.get_text() for t in fig.texts)


def test_live_ranks_draws_one_box_per_rank():
    fig = plot_live_ranks(world_size=3)
    drawn = texts(fig)
    assert all(f"rank {r}\n" in drawn for r in range(3)) and "rank 3\n" not in drawn
    plt.close(fig)


def test_ddp_collectives_shows_broadcast_then_all_reduce_per_rank():
    fig = plot_ddp_collectives(world_size=4)
    titles = [ax.get_title() for ax in fig.axes]
    assert "broadcast" in titles[0] and "all-reduce" in titles[1]
    drawn = texts(fig)
    assert drawn.count("weights\nW0") == 5 and drawn.count("gradient\nmean(g)") == 4
    # the all-reduce combines: its panel has one "sum of g/4 = mean" box, with an arrow in from and out to each rank
    assert [t.get_text() for t in fig.axes[1].texts].count("sum of\ng/4\n= mean") == 1
    assert "this box is no process" in drawn  # the ranks compute the mean together: no server
    arrows = [a for a in fig.axes[1].texts if a.get_text() == "" and hasattr(a, "xy")]
    assert len(arrows) == 2 * 4
    plt.close(fig)


def test_busy_port_names_the_port_and_job_map_the_spawn_call():
    fig = plot_busy_port(12399)
    assert "port 12399" in texts(fig) and "a new job joins an old store" in texts(fig)
    plt.close(fig)
    fig = plot_job_map(world_size=2)
    assert "args=(world_size,)" in texts(fig) and "fn(1, 2)" in texts(fig)
    assert "run by the notebook's process" in texts(fig)  # mp.spawn is no process of its own
    plt.close(fig)


def test_file_store_draws_one_box_per_rank_and_the_file():
    fig = plot_file_store(world_size=3)
    drawn = texts(fig)
    assert all(f"rank {r}\n" in drawn for r in range(3)) and "rank 3\n" not in drawn
    assert "some_file" in drawn and "3 ranks" in fig.axes[0].get_title()
    plt.close(fig)


def test_gradient_average_draws_every_rank_and_one_mean():
    fig = plot_gradient_average(world_size=3)
    drawn = texts(fig)
    assert all(f"rank {r}\n" in drawn for r in range(3)) and "rank 3\n" not in drawn
    assert "(g0 + g1 + g2) / 3" in drawn and drawn.count("w - lr × mean") == 3
    plt.close(fig)


def test_threads_on_cores_draws_more_threads_than_cores_then_one_per_core():
    from ddp_lib.plots.start_here import plot_threads_on_cores

    fig = plot_threads_on_cores(cores=2, world_size=2)
    left, right = ([t.get_text() for t in ax.texts] for ax in fig.axes)
    assert left.count("thread") == 4 and right.count("thread") == 2  # 2 ranks x 2 threads, then x 1
    assert left.count("core 0") == right.count("core 0") == 1 and "core 2" not in left
    assert "set_num_threads(1)" in fig.axes[1].get_title()
    plt.close(fig)
    fig = plot_threads_on_cores(cores=2, world_size=4)  # more ranks than cores: still one thread each
    assert [t.get_text() for t in fig.axes[1].texts].count("thread") == 4
    plt.close(fig)
    fig = plot_threads_on_cores(cores=8, world_size=2, default_threads=4)  # torch's default below the cores
    left, right = ([t.get_text() for t in ax.texts] for ax in fig.axes)
    assert left.count("thread") == 8 and right.count("thread") == 8 and "take turns" not in fig.axes[0].get_title()
    plt.close(fig)


def test_device_ids_move_moves_the_input_only_with_device_ids():
    fig = plot_device_ids_move(gpu=1)
    drawn = texts(fig)
    assert "device_ids=[1])" in drawn and "moved to\ncuda:1" in drawn
    assert "device_ids=None)" in drawn and "still on the CPU" in drawn
    assert drawn.count("model\non cuda:1") == 2 and drawn.count("input\nmade on the CPU") == 2
    plt.close(fig)


def test_pickle_by_name_shows_both_messages_and_outcomes():
    fig = plot_pickle_by_name()
    drawn = texts(fig)
    assert "('__main__', 'hello')" in drawn and "('my_work.classic_ddp',\n'demo_basic')" in drawn
    assert "no hello\nfails" in drawn and "demo_basic\nruns" in drawn
    plt.close(fig)
