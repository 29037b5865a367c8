"""Lesson 01's rank that never joins: every started rank fails after the short timeout, and rank 0
counts the clients that joined."""

import ddp_lib.mp
from ddp_lib.demos.never_joined import join_without_last_rank, store_error_parts


def test_started_ranks_fail_after_the_timeout(monkeypatch):
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    results = ddp_lib.mp.labelled_spawn(join_without_last_rank, args=(3,), nprocs=2)
    assert all(r["error"] != "joined" for r in results)
    assert "2/3 clients joined" in results[0]["error"]
    # rank 1 ends by its own timeout, not by finding the store gone
    assert results[1]["error"].startswith("DistStoreError: wait timeout"), results[1]
    assert all(r["waited"] < 60 for r in results)
    assert results[0]["said"] == "DistStoreError: Timed out after N seconds waiting for clients. 2/3 clients joined."
    assert results[1]["said"] == "DistStoreError: wait timeout after 2000ms"
    assert results[1]["keys"].endswith("/0")  # rank 0's address, which it never wrote


def test_store_error_parts_hides_the_seconds_and_splits_off_the_keys():
    assert store_error_parts("DistStoreError: Timed out after 12 seconds waiting for clients. 2/3 clients joined.") == {
        "said": "DistStoreError: Timed out after N seconds waiting for clients. 2/3 clients joined.", "keys": ""}
    assert store_error_parts("DistStoreError: wait timeout after 1000ms, keys: /default_pg/0//cpu//0/0") == {
        "said": "DistStoreError: wait timeout after 1000ms", "keys": "/default_pg/0//cpu//0/0"}
