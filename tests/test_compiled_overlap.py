"""Lesson 09's compiled_overlap: under aot_eager, DDP's all-reduces start during a compiled backward
only with dynamo's DDP graph split on."""

from ddp_lib.demos.compiled_overlap import allreduces_during_backward
from ddp_lib.launch import run_ranks


def test_the_split_lets_allreduces_start_during_backward():
    for r in run_ranks(allreduces_during_backward, 2, show_output=False):
        on, off = r["optimize_ddp=True"], r["optimize_ddp=False"]
        assert on["backward_graphs"] == on["allreduces"] == 3 and on["started_during_backward"] == 2
        assert off["backward_graphs"] == 1 and off["allreduces"] == 3 and off["started_during_backward"] == 0
        for setting in (on, off):  # the timeline starts at the first backward graph, in time order
            times = [t for _, t in setting["timeline"]]
            assert setting["timeline"][0] == ("backward graph starts", 0.0) and times == sorted(times)
            assert [e for e, _ in setting["timeline"]].count("all-reduce") == setting["allreduces"]
            assert [e for e, _ in setting["timeline"]].count("all-reduce ends") == setting["allreduces"]


def test_the_measured_timeline_draws_one_box_per_backward_graph():
    from ddp_lib.plots.loop import plot_measured_backward

    def setting(graphs: int) -> dict:
        timeline = [(e, 0.001 * i) for i, e in enumerate(["backward graph starts", "backward graph ends"] * graphs)]
        return {"timeline": timeline + [("all-reduce", 0.001 * len(timeline))] * 3}

    ax = plot_measured_backward({"optimize_ddp=True": setting(3), "optimize_ddp=False": setting(1)}).axes[0]
    assert len(ax.patches) == 3 + 1 and len(ax.lines) == 3 + 3


def test_the_measured_timeline_draws_each_all_reduce_from_its_start_to_its_end():
    from ddp_lib.plots.loop import plot_measured_backward

    timeline = [("backward graph starts", 0.0), ("all-reduce", 0.001), ("backward graph ends", 0.002),
                ("all-reduce ends", 0.004)]
    ax = plot_measured_backward({"optimize_ddp=True": {"timeline": timeline},
                                 "optimize_ddp=False": {"timeline": timeline}}).axes[0]
    bars = [p for p in ax.patches if abs(p.get_width() - 3.0) < 1e-9]
    assert len(ax.patches) == 2 * 2 and len(bars) == 2  # per row: one graph box, one all-reduce bar 1 to 4 ms
