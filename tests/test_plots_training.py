"""Lesson 05's plots: the evaluation-shard schematic follows DistributedSampler's padding; loss curves shade
the bands they are given; the crash/resume schematic draws the template's resume (rank 0 reads last.pt,
then broadcasts); the Join schematic labels every collective box as the all-reduce it is."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

from ddp_lib.plots.training import (  # noqa: E402
    KIND_COLOURS,
    plot_crash_resume,
    plot_join_timeline,
    plot_loss_curves,
    plot_lr_scaling,
    plot_padded_vs_strided,
)


def test_the_padded_panel_draws_what_distributed_sampler_reads_and_the_strided_one_each_sample_once():
    fig = plot_padded_vs_strided(10, 4)
    padded, strided = ([int(t.get_text()) for t in ax.texts if t.get_text().isdigit()] for ax in fig.axes[:2])
    sampler = sorted(i for r in range(4) for i in DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False))
    assert sorted(padded) == sampler and len(padded) == 12  # samples 0 and 1 twice
    assert sorted(strided) == list(range(10))
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == 4 and not [p for p in fig.axes[1].patches if p.get_hatch()]


def test_loss_curves_shade_a_band_only_for_the_labels_given():
    ax = plot_loss_curves({"a": [3.0, 2.0, 1.0], "b": [2.0, 1.5, 1.0]}, bands={"a": ([2.5, 1.5, 0.5], [3.5, 2.5, 1.5])})
    assert len(ax.lines) == 2 and len(ax.collections) == 1
    ax.figure.canvas.draw()
    assert all(tick == int(tick) for tick in ax.get_xticks())  # whole epochs only
    plt.close(ax.figure)


def test_the_learning_rate_panels_draw_each_setting_with_its_band_and_lr_04_in_one_colour():
    from ddp_lib.demos.batch_scaling import summarize_lr_scaling

    curves = {k: [[1.0, 0.6 + s / 10, 0.4] for s in range(3)] for k in ("lr 0.1", "lr 0.4", "lr 0.4, warm-up")}
    fig = plot_lr_scaling(summarize_lr_scaling(curves, [[1.0, 0.5, 0.3]] * 3))
    left, right = fig.axes
    assert [len(ax.lines) for ax in (left, right)] == [3, 2] and [len(ax.collections) for ax in (left, right)] == [3, 2]
    assert left.lines[2].get_color() == right.lines[0].get_color() == "tab:green"  # lr 0.4 in both panels
    plt.close(fig)


def test_the_crash_resume_figure_draws_the_templates_resume_rank_0_reads_last_pt_and_broadcasts():
    from matplotlib.colors import to_rgba

    fig = plot_crash_resume(crash_epoch=3, epochs=3)
    ax = fig.axes[0]
    job2 = [p for p in ax.patches if p.get_y() < -1.0]  # rows 3 and 4: the resumed job
    assert len([p for p in job2 if p.get_facecolor()[:3] == to_rgba("C1")[:3]]) == 2  # one broadcast per rank
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("read last.pt") == 1 and texts.count("broadcast") == 2 and texts.count("e3") == 2
    assert "rank 0 alone reads last.pt and broadcasts" in ax.get_title()
    job1 = [p for p in ax.patches if p.get_y() > -1.0 and p.get_facecolor()[:3] == to_rgba("C1")[:3]]
    assert len(job1) == 4  # after epochs 1 and 2, on each rank
    assert texts.count("save +\nbarrier") == 2 and texts.count("barrier") == 2  # only rank 0 saves
    bottom = min(p.get_y() for p in ax.patches)
    assert ax.get_ylim()[0] > bottom - 0.2  # no empty band below the last row
    plt.close(fig)


def test_the_join_timeline_labels_each_collective_box_as_an_all_reduce_and_rank_0_shadows_two_steps():
    from matplotlib.colors import to_rgba

    fig = plot_join_timeline()
    ax = fig.axes[0]
    # each box's label is the text at its centre
    centres = {(round(t.get_position()[0], 3), round(t.get_position()[1], 3)): t.get_text() for t in ax.texts}
    boxes = [(centres[(round(p.get_x() + p.get_width() / 2, 3), round(p.get_y() + 0.2, 3))], p) for p in ax.patches]
    not_work = [(label, p) for label, p in boxes
                if p.get_facecolor()[:3] not in (to_rgba(KIND_COLOURS["work"])[:3], to_rgba(KIND_COLOURS["waits"])[:3])]
    assert len(not_work) == 10  # 4 steps and the exit, on 2 ranks
    assert all("all-reduce" in label for label, _ in not_work)
    shadows = [(label, p) for label, p in not_work if p.get_facecolor()[:3] == to_rgba(KIND_COLOURS["shadow"])[:3]]
    assert [label for label, _ in shadows] == ["all-reduce\nof zeros"] * 2
    assert "one orange box: a step's all-reduces" in ax.get_title()
    assert all(p.get_y() == 0 for _, p in shadows)  # rank 0's row, the top one
    assert sum(label.startswith("leave Join") for label, _ in boxes) == 2
    plt.close(fig)
