"""DDP from scratch, three ways, each checked equal to torch's DDP over several steps on gloo."""

import pytest
import torch
from torch import nn

from ddp_lib.launch import run_ranks
from ddp_lib.workers import buckets
from ddp_lib.workers.buckets import scratch_vs_torch
from ddp_lib.workers.gradients import make_mlp

# Parameters per step for WIDTHS: 3 weights and 3 biases.
EXPECTED_CALLS = {"after_backward": 6, "per_parameter_hooks": 6, "buckets": 3}


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("way", ["after_backward", "per_parameter_hooks", "buckets"])
def test_scratch_ddp_matches_torch_ddp(way, world_size):
    results = run_ranks(scratch_vs_torch, world_size, (way, 4, 0.001), show_output=False)
    for r in results:
        assert r["max_grad_diff"] <= 1e-6 and r["max_param_diff"] <= 1e-6
        assert r["ranks_equal"]
        assert r["allreduces_per_step"] == [EXPECTED_CALLS[way]] * 4


def test_bucket_cap_sets_the_bucket_count():
    results = run_ranks(scratch_vs_torch, 2, ("buckets", 2, 25.0), show_output=False)
    assert results[0]["allreduces_per_step"] == [1, 1] and results[0]["max_param_diff"] <= 1e-6


def test_make_refuses_an_unknown_way():
    with pytest.raises(ValueError, match="unknown way 'ring'; accepted: after_backward"):
        buckets.make("ring", nn.Linear(2, 2))


def test_buckets_fill_from_the_last_layer(monkeypatch):
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(torch.distributed, "broadcast", lambda *a, **k: None)
    model = buckets.BucketedOverlapDDP(make_mlp(0), bucket_cap_mb=0.001)
    names = {id(p): n for n, p in model.module.named_parameters()}
    assert [[names[id(p)] for p in b] for b in model.buckets] == [
        ["4.bias", "4.weight", "2.bias"], ["2.weight"], ["0.bias", "0.weight"]]


def test_gradient_as_bucket_view_puts_each_grad_inside_its_bucket():
    # Lesson 04: without the option every .grad has its own memory; with it, one block per bucket.
    # With zero_grad()'s default set_to_none=True the view is lost each step: a copy in per parameter
    # again, but never a copy back out (copy_bucket_to_grad runs only without the option).
    result = run_ranks(buckets.grads_in_buckets, 2)[0]
    copy, view_lost, view_kept = (result[k] for k in ("copy, set_to_none=True", "view, set_to_none=True",
                                                       "view, set_to_none=False"))
    assert copy["memory_blocks"] == copy["parameters"] == copy["copies_into_bucket"] == 10
    assert view_lost["memory_blocks"] == view_lost["buckets"] > 1 and view_lost["copies_into_bucket"] == 10
    assert view_kept["memory_blocks"] == view_kept["buckets"] and view_kept["copies_into_bucket"] == 0
    assert view_kept["divisions_in_place"] == 10 and result["detach_ error"].startswith("Can't detach views")
    assert copy["copies_back"] == 10 and view_lost["copies_back"] == view_kept["copies_back"] == 0


def test_gradient_as_bucket_view_saves_one_full_set_of_gradients_in_bytes():
    # Lesson 04: without the option, buckets and .grad each hold the parameters' bytes; with it, buckets only.
    result = run_ranks(buckets.gradient_bytes, 2)[0]
    for setting, counts in result.items():
        one_set = counts["parameter_bytes"]
        assert counts["bucket_bytes"] == one_set
        assert counts["gradient_bytes"] == (2 * one_set if setting.startswith("copy") else one_set), setting


def test_the_lesson04_schematics_draw():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_bucket_schedule, plot_construction_broadcast, plot_gradient_average

    assert plot_gradient_average().axes and plot_bucket_schedule().axes and plot_construction_broadcast().axes


def test_the_timeline_of_many_all_reduces_has_no_colour_bar():
    # Lesson 04's comparison: 14 all-reduces after backward drawn as thick bars in two lanes, one axes only.
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_timeline

    timeline = {"backward_ms": 10.0, "grad_ready": [(i, float(i)) for i in range(7)],
                "allreduces": [{"bucket": b, "start": 10.0 + b, "end": 11.0 + b} for b in range(14)]}
    fig = plot_timeline([timeline])
    bars = [patch for patch in fig.axes[0].patches if patch.get_height() < 0.5]
    assert len(fig.axes) == 1 and len(bars) == 14 and min(bar.get_height() for bar in bars) > 0.3


def test_the_timeline_shades_the_wait_for_the_other_rank():
    # Lesson 04, section 4: a bar is pale from its rank's start until the last rank started that all-reduce.
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_timeline

    def timeline(start: float) -> dict:
        return {"backward_ms": 20.0, "grad_ready": [("w", 1.0)],
                "allreduces": [{"bucket": 0, "start": start, "end": 15.0}]}
    fig = plot_timeline([timeline(2.0), timeline(9.0)], shade_waits=True)
    pale = sorted(patch.get_width() for patch in fig.axes[0].patches
                  if patch.get_height() < 0.5 and patch.get_facecolor()[:3] == (1.0, 1.0, 1.0))
    assert pale == [0.0, 7.0]  # rank 0 waited 2 -> 9 ms; rank 1 started last and waited for no one


def test_the_timeline_marks_when_every_gradient_was_averaged_and_centres_each_label_on_its_bars():
    # Lesson 04's comparison: 14 all-reduces in one row, 4 in the next; a dashed line per row at synced_ms.
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_timeline

    def timeline(n: int, synced: float) -> dict:
        return {"backward_ms": 10.0, "synced_ms": synced, "grad_ready": [("w", 1.0)],
                "allreduces": [{"bucket": b, "start": 2.0 + b, "end": 3.0 + b} for b in range(n)]}
    fig = plot_timeline([timeline(14, 20.0), timeline(4, 12.0)], names=["after", "buckets"], mark_synced=True)
    ax = fig.axes[0]
    marks = [c for c in ax.collections if c.get_gid() == "synced"]
    assert sorted(seg[0][0] for c in marks for seg in c.get_segments()) == [12.0, 20.0]
    ticks = dict(zip((t.get_text() for t in ax.get_yticklabels()), ax.get_yticks()))
    bars = [patch for patch in ax.patches if patch.get_height() < 0.5]
    buckets_rows = [bar.get_y() + bar.get_height() / 2 for bar in bars[14:]]
    assert abs(ticks["buckets: 4 all-reduces"] - (min(buckets_rows) + max(buckets_rows)) / 2) < 1e-9


def test_the_timeline_labels_per_parameter_all_reduces_p_and_bucket_ones_b():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_timeline

    def timeline(n: int) -> dict:
        return {"backward_ms": 10.0, "synced_ms": 12.0, "grad_ready": [("w", 1.0)],
                "allreduces": [{"bucket": b, "start": 2.0 + b, "end": 3.0 + b} for b in range(n)]}
    labels = [t.get_text() for t in plot_timeline([timeline(3), timeline(2)], prefixes=["p", "b"]).axes[0].texts]
    assert labels == ["p0", "p1", "p2", "b0", "b1"]
    assert [t.get_text() for t in plot_timeline([timeline(2)]).axes[0].texts] == ["b0", "b1"]


def test_the_timeline_with_mark_starts_puts_each_start_on_the_backward_band_and_hatches_the_wait():
    import matplotlib

    matplotlib.use("Agg")
    from ddp_lib.plots.gradients import plot_timeline

    timeline = {"backward_ms": 10.0, "synced_ms": 12.0, "grad_ready": [("w", 1.0)],
                "allreduces": [{"bucket": b, "start": 2.0 + b, "end": 9.0} for b in range(3)]}
    ax = plot_timeline([timeline], mark_starts=True).axes[0]
    starts = [line for line in ax.lines if line.get_marker() == "v"]
    assert [(line.get_xdata()[0], line.get_ydata()[0]) for line in starts] == [(2.0, 0), (3.0, 0), (4.0, 0)]
    ticks = [line for line in ax.lines if line.get_marker() == "|"]
    assert all(t.get_zorder() > s.get_zorder() for t in ticks for s in starts)  # a tick stays visible on a start
    assert all(bar.get_hatch() == "//" for bar in ax.patches[1:])  # the first patch is the backward band
    assert [t.get_text().strip() for t in ax.texts] == ["b0", "b1", "b2"]
    assert all(t.get_horizontalalignment() == "right" for t in ax.texts)
    assert "waiting: from its start until this rank saw it done" in [t.get_text() for t in ax.get_legend().texts]
