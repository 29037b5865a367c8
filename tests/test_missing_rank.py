"""ddp_lib.demos.missing_rank: monitored_barrier names the rank that never called it (real processes, gloo)."""

import pytest

import ddp_lib.mp
from ddp_lib.demos.missing_rank import one_rank_missing


@pytest.fixture(autouse=True)
def own_port(monkeypatch):
    """A free port for the ranks, not the tutorial's default 12355, which other tests hold while they run."""
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))


def test_rank_0_names_the_missing_rank():
    seen = ddp_lib.mp.labelled_spawn(one_rank_missing, args=(3, 1, 1.0), nprocs=3)
    assert "Rank 1 failed to pass monitoredBarrier" in seen[0]
    assert seen[1] == "did not call monitored_barrier"
    assert "check rank 0 logs" in seen[2]
