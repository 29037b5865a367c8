import matplotlib

matplotlib.use("Agg")

from ddp_lib.plots.lost_host_sketch import plot_dead_vs_lost  # noqa: E402


def texts(fig):
    return " ".join(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title])


def test_the_dead_vs_lost_sketch_contrasts_a_closed_connection_with_a_timeout():
    fig = plot_dead_vs_lost()
    assert [ax.get_title() for ax in fig.axes] == ["A dead process on a live host", "A lost host"]
    assert "raises at once: connection closed" in texts(fig)
    assert "raises at the group's timeout" in texts(fig)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0", "rank 1"]
