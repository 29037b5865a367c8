"""ddp_lib.demos.server_threads: the forkserver's threads and a rank's, counted in real processes."""

import sys

import pytest

from ddp_lib.demos.server_threads import forkserver_thread_counts


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_rank_starts_with_one_thread_and_computing_adds_more():
    counts = forkserver_thread_counts()
    assert counts["rank, just started"] == 1
    assert counts["rank, after a matrix multiply"] > 1
    assert counts["forkserver"] >= 1
