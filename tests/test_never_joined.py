"""Lesson 01's rank that never joins: every started rank fails after the short timeout, and rank 0
counts the clients that joined."""

import ddp_lib.mp
from ddp_lib.demos.never_joined import join_without_last_rank


def test_started_ranks_fail_after_the_timeout(monkeypatch):
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    results = ddp_lib.mp.spawn(join_without_last_rank, args=(3,), nprocs=2)
    assert all(r["error"] != "joined" for r in results)
    assert "2/3 clients joined" in results[0]["error"]
    # rank 1 ends by its own timeout, not by finding the store gone
    assert results[1]["error"].startswith("DistStoreError: wait timeout"), results[1]
    assert all(r["waited"] < 60 for r in results)
