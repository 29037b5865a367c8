"""ddp_lib.demos.missing_rank: monitored_barrier names the rank that never called it (real processes, gloo)."""

import pytest

import ddp_lib.mp
from ddp_lib.demos.missing_rank import one_rank_missing

pytestmark = pytest.mark.usefixtures("free_master_port")  # not the tutorial's 12355


def test_rank_0_names_the_missing_rank():
    seen = ddp_lib.mp.labelled_spawn(one_rank_missing, args=(3, 1, 1.0), nprocs=3)
    assert "Rank 1 failed to pass monitoredBarrier" in seen[0]
    assert seen[1] == "did not call monitored_barrier"
    assert "check rank 0 logs" in seen[2]
