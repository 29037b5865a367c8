"""ddp_lib.demos.server_threads: the forkserver's threads and a rank's, counted in real processes."""

import sys

import pytest

from ddp_lib.demos.server_threads import forkserver_thread_counts
from ddp_lib.forkserver import start_forkserver


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_computing_starts_more_threads_in_a_rank():
    start_forkserver()  # as lesson 02 does; a no-op where a forkserver runs already
    counts = forkserver_thread_counts()
    assert counts["forkserver"] >= 1
    assert counts["rank, after a matrix multiply"] > counts["rank, just started"] >= 1
