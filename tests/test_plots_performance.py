"""Lesson 08's pictures: algbw and busbw both named, and zeros on a log axis said, not dropped."""

import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.performance import plot_allreduce  # noqa: E402


def _row(world_size, nbytes, time_us, algbw):
    factor = 2 * (world_size - 1) / world_size
    return {"world_size": world_size, "bytes": nbytes, "time_us": time_us, "algbw_gbs": algbw,
            "busbw_gbs": algbw * factor}


def test_two_ranks_draw_one_line_named_for_both_and_four_ranks_two():
    rows = [_row(2, 4, 300.0, 0.01), _row(2, 1024, 400.0, 0.1), _row(4, 4, 500.0, 0.02), _row(4, 1024, 600.0, 0.2)]
    fig = plot_allreduce({"rows": rows, "copy_gbs": 10.0, "loopback_gbs": 3.0})
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "busbw = algbw, 2 ranks" in labels
    assert "busbw, 4 ranks" in labels and "algbw, 4 ranks" in labels
    assert not any("zero" in t.get_text() for t in fig.texts)


def test_the_memory_copy_and_loopback_lines_are_named_inside_the_plot():
    rows = [_row(2, 4, 300.0, 0.01), _row(2, 1024, 400.0, 0.1)]
    fig = plot_allreduce({"rows": rows, "copy_gbs": 10.0, "loopback_gbs": 3.0})
    named = {t.get_text(): t.get_position()[1] for t in fig.axes[1].texts}
    assert named == {"memory copy": 10.0, "loopback": 3.0}


def test_bandwidths_that_round_to_zero_in_the_table_are_still_drawn():
    rows = [_row(2, 4, 300.0, 0.0), _row(2, 1024, 400.0, 0.003)]  # 4 B in 300 us: 1.3e-5 GB/s, 0.000 rounded
    fig = plot_allreduce({"rows": rows, "copy_gbs": 10.0, "loopback_gbs": 3.0})
    (line,) = [ln for ln in fig.axes[1].get_lines() if ln.get_label() == "busbw = algbw, 2 ranks"]
    assert abs(line.get_ydata()[0] - 4 / 300e-6 / 1e9) < 1e-12
    assert fig.texts == []


def test_a_time_of_zero_is_counted_in_the_figure_not_dropped_silently():
    rows = [_row(2, 4, 0.0, 0.0), _row(2, 1024, 400.0, 0.003)]
    fig = plot_allreduce({"rows": rows, "copy_gbs": 10.0, "loopback_gbs": 3.0})
    assert [t.get_text() for t in fig.texts] == ["2 point(s) of zero not drawn on the log axes"]


def test_the_fitted_model_is_drawn_and_named_with_its_two_numbers():
    rows = [{**_row(2, 4, 100.0, 0.0), "q1_us": 90.0, "q3_us": 110.0},
            {**_row(2, 1 << 20, 1100.0, 0.95), "q1_us": 1000.0, "q3_us": 1200.0}]
    models = [{"world_size": 2, "alpha_us": 100.0, "beta_gbs": 1.05}]
    fig = plot_allreduce({"rows": rows, "models": models, "copy_gbs": 10.0, "loopback_gbs": 3.0})
    (line,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "100 us + size / 1.05 GB/s"]
    assert abs(line.get_ydata()[1] - (100 + (1 << 20) / 1050)) < 1e-9


def test_bucket_caps_are_labelled_and_the_default_is_named():
    from ddp_lib.plots.performance import plot_buckets
    rows = [{"bucket_cap_mb": cap, "label": label, "allreduces": n, "step_ms": 10.0, "ratio": 1.0}
            for cap, label, n in ((0.01, "0.01", 5), (25.0, "25", 1), (None, "default", 2))]
    fig = plot_buckets({"rows": rows, "world_size": 2})
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0.01", "25", "default"]


def test_the_overlap_timeline_draws_one_row_per_all_reduce_and_marks_where_backward_ends():
    from ddp_lib.plots.performance import plot_overlap

    rows = [{"lane": "backward", "name": "AddmmBackward0", "start_ms": 1.0, "end_ms": 3.0},
            {"lane": "backward", "name": "AddmmBackward0", "start_ms": 3.0, "end_ms": 6.0},
            {"lane": "all-reduce", "name": "gloo:all_reduce", "start_ms": 2.5, "end_ms": 7.0},
            {"lane": "all-reduce", "name": "gloo:all_reduce", "start_ms": 6.5, "end_ms": 8.0}]
    fig = plot_overlap({"rows": rows, "bucket_cap_mb": 1.0})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["all-reduce 1", "all-reduce 0", "backward"]
    (end,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert list(end.get_xdata()) == [6.0, 6.0]


def test_the_oversubscription_schematic_lets_half_the_ranks_run_in_each_slice():
    from ddp_lib.plots.performance import draw_oversubscription

    fig = draw_oversubscription(ranks=4, cores=2, slices=6)
    # Per rank, one collection of running slices, then one of waiting ones.
    running, waiting = fig.axes[0].collections[0::2], fig.axes[0].collections[1::2]
    assert [len(c.get_paths()) for c in running] == [3, 3, 3, 3]
    assert [len(c.get_paths()) for c in waiting] == [3, 3, 3, 3]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [f"rank {r}" for r in range(4)]


def test_the_scaling_ideal_stops_at_the_core_count():
    from ddp_lib.plots.performance import plot_scaling

    rates = ((1, 100.0), (2, 150.0), (4, 120.0))
    rows = [{"world_size": n, "policy": "one", "samples_per_s": rate} for n, rate in rates]
    fig = plot_scaling({"rows": rows, "cpu_count": 2})
    (ideal,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("ideal")]
    assert list(ideal.get_ydata()) == [100.0, 200.0, 200.0]


def test_the_alpha_beta_sketch_doubles_alpha_at_the_half_bandwidth_size():
    from ddp_lib.plots.performance import draw_alpha_beta_sketch

    fig = draw_alpha_beta_sketch(alpha_us=256.0, beta_gbs=1.024)  # S1/2 = 2**18 B, on the drawn grid
    (curve,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "t = α + S / β"]
    at_half = dict(zip(curve.get_xdata(), curve.get_ydata()))[2.0 ** 18]
    assert abs(at_half - 2 * 256.0) < 1e-9


def test_gloo_ring_sends_follow_gloo_counts_and_direction():
    from ddp_lib.bench.gloo_ring import ring_sends
    from ddp_lib.plots.performance import draw_gloo_ring

    # 4 B is one float: one segment with data, sent N-1 times per phase.
    assert [len(ring_sends(n, 4)) for n in (4, 16, 64, 256 << 10)] == [6, 24, 48, 48]
    assert len(ring_sends(64, 2)) == 8
    # above 2N MiB gloo cuts 1 MiB segments: 64 segments at 64 MiB on 2 ranks, 32 iterations per phase
    assert [len(ring_sends(n << 20, 2)) for n in (1, 4, 8, 64)] == [8, 8, 16, 128]
    assert [len(ring_sends(n << 20, 4)) for n in (8, 16, 64)] == [48, 96, 384]
    one_float = ring_sends(4, 4)
    assert [(s["rank"], s["to"]) for s in one_float if s["phase"] == "reduce-scatter"] == [(3, 2), (2, 1), (1, 0)]
    assert [(s["rank"], s["to"]) for s in one_float if s["phase"] == "all-gather"] == [(0, 3), (3, 2), (2, 1)]
    fig = draw_gloo_ring(ring_sends(64, 4), 4, 64)
    assert fig.axes[0].get_title().endswith("48 messages, at most 12 sent by one rank")


def test_the_timing_schematic_keeps_the_slowest_ranks_time():
    from ddp_lib.plots.performance import draw_timing_schematic

    fig = draw_timing_schematic(arrivals=(0.0, 0.6), durations=(2.4, 1.6))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "MAX: every rank learns 2.4" in texts
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0", "rank 1"]


def test_the_two_bucket_rules_give_torchs_4_and_lesson_04s_7_buckets_at_1_mib():
    from ddp_lib.bench.ranks import DDP_WIDTHS
    from ddp_lib.plots.performance import draw_bucket_rules, fill_buckets
    from ddp_lib.workers.shared import make_mlp

    sizes = [4 * p.numel() for p in reversed(list(make_mlp(0, DDP_WIDTHS).parameters()))]
    assert fill_buckets(sizes, 2**20, "reached") == [[0, 1, 2, 3], [4, 5], [6, 7], [8, 9]]  # as torch's own function
    assert len(fill_buckets(sizes, 2**20, "overflow")) == 7
    fig = draw_bucket_rules(sizes, 2**20)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("4 all-reduces") == 1 and texts.count("7 all-reduces") == 1


def test_the_busbw_sketch_sends_2_n_minus_1_chunks_per_rank():
    from ddp_lib.plots.step_sketches import draw_busbw_sketch

    ax = draw_busbw_sketch(world_size=4).axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r} sends" for r in range(4)]
    assert texts.count("S/N") == 4 * 6 and texts.count("6 × S/N = 1.5 × S") == 4


def test_draw_bucket_rules_draws_only_the_rules_asked():
    from ddp_lib.plots.performance import draw_bucket_rules

    sizes = [80, 20480, 2048, 1048576, 2048, 1048576]  # bias then weight, last layer first
    ax = draw_bucket_rules(sizes, cap=10485, rules=("reached",)).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["torch: closes once it reached the cap"]
    assert "3 all-reduces" in [t.get_text() for t in ax.texts]


def test_the_step_sketches_draw_one_row_per_lane():
    from ddp_lib.plots.step_sketches import draw_ddp_step_sketch, draw_ring_vs_gloo, draw_scaling_sketch

    ddp = draw_ddp_step_sketch().axes[0]
    assert [t.get_text() for t in ddp.get_yticklabels()] == ["local step", "DDP step, each rank"]
    # the DDP row's compute is cut by the copies into the bucket, made during backward
    assert [t.get_text() for t in ddp.texts].count("compute") == 1 + 4
    title = draw_scaling_sketch(step=1.0, allreduce=0.6).axes[0].get_title()
    assert "1.25" in title and "illustrative" in title
    ring = draw_ring_vs_gloo(world_size=4).axes[0]
    texts = [t.get_text() for t in ring.texts]
    assert texts.count("Py") == 6 + 1 and "6 Python calls, 6 messages of S/N" in texts
    assert "1 Python call, 12 of S/2N" in texts and "sums one half-chunk while it sends the other" in ring.get_title()
    # the ring adds after each of its 3 reduce-scatter messages; gloo's sums sit beside its sends, on their own row
    assert texts.count("+") == 3 and len(ring.get_yticklabels()) == 3


def test_plot_allreduce_labels_oversubscribed_ranks_and_draws_a_given_fit_from_its_size():
    rows = [{"world_size": n, "bytes": 4**k, "time_us": 100.0 + k} for n in (2, 4) for k in range(1, 6)]
    fig = plot_allreduce({"rows": rows, "copy_gbs": 10.0, "loopback_gbs": 3.0, "cpu_count": 2},
                         fits={2: (1e-4, 1e9)}, fit_from=64)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "4 ranks on 2 cores (oversubscribed)" in labels and "2 ranks" in labels
    dashed = [line for line in fig.axes[0].get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and min(dashed[0].get_xdata()) == 64


def test_the_step_breakdown_says_its_bars_are_medians_of_parts_not_the_median_step():
    from ddp_lib.plots.performance import plot_step_breakdown

    parts = {"forward": 1.0, "backward computation": 2.0, "communication not hidden": 3.0, "optimizer": 0.5}
    fig = plot_step_breakdown({"bucket_cap_mb=1": parts, "bucket_cap_mb=25": parts})
    title = fig.axes[0].get_title()
    assert "median of each part" in title and "need not add up to the median step" in title
    assert len(fig.axes[0].patches) == 8


def test_the_bucket_sweep_draws_each_caps_paired_differences_from_the_default_with_zero_marked():
    from ddp_lib.plots.performance import plot_bucket_sweep
    rows = [{"bucket_cap_mb": cap, "label": label, "allreduces": n, "rounds_ms": rounds}
            for cap, label, n, rounds in ((0.01, "0.01", 5, [14.0, 15.0, 16.0, 17.0]),
                                          (25.0, "25", 1, [10.0, 13.0, 12.0, 13.0]),
                                          (None, "default", 2, [11.0, 12.0, 12.0, 14.0]))]
    fig = plot_bucket_sweep({"rows": rows, "world_size": 2, "repeats": 4})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    # each cap's all-reduces per step, then the rounds in which the default's step was shorter
    assert sorted(t.get_text() for t in ax.texts) == ["1; 1", "5; 4"]
    (zero,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert list(zero.get_ydata()) == [0.0, 0.0] and "default" in zero.get_label()
    (points,) = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    # medians of the paired differences: 0.01 is 3, 3, 4, 3 above the default; 25 is -1, 1, 0, -1
    assert list(points.get_ydata()) == [3.0, -0.5]
