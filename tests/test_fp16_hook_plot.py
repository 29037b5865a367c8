"""The lesson 04 schematic of fp16_compress_hook: one row of boxes per rank and one shared all-reduce."""

import matplotlib.pyplot as plt
import pytest

from ddp_lib.plots.fp16_hook import plot_fp16_hook


@pytest.mark.parametrize("world_size", [2, 3])
def test_one_row_per_rank_and_one_all_reduce(world_size):
    fig = plot_fp16_hook(world_size)
    ax = fig.axes[0]
    # 3 steps before and 1 after the all-reduce on every rank, plus the one all-reduce box
    assert len([p for p in ax.patches if type(p).__name__ == "Rectangle"]) == 4 * world_size + 1
    texts = [t.get_text() for t in ax.texts]
    assert sum(t.startswith("rank ") for t in texts) == world_size
    assert f"N = {world_size}" in fig._suptitle.get_text()
    # the cast and the division both can flush a tiny value to 0, so the warning spans both boxes
    assert any("either box" in t for t in texts)
    plt.close(fig)


def test_no_ranks_is_refused():
    with pytest.raises(ValueError, match="world_size must be at least 1, got 0"):
        plot_fp16_hook(0)
