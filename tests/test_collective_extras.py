"""Lesson 01's later workers: who waits for a late rank, object collectives, the single-tensor
variants and async_op=True (real processes on gloo)."""

from ddp_lib.launch import run_ranks
from ddp_lib.workers import collective_extras


def test_barrier_and_all_reduce_wait_for_a_late_rank_and_broadcasts_source_need_not():
    delay = 1.5
    # 4 ranks, as in the lesson (on 3 ranks gloo's rank 0 waits for the late rank too).
    results = run_ranks(collective_extras.late_arrival, 4, (delay,))
    on_time = results[:-1]
    # Wide margins: waiting means at least half the delay, not waiting under a quarter of it.
    for name in ("barrier", "all_reduce"):
        assert all(r["waited"][name] >= delay / 2 for r in on_time), (name, results)
    assert results[0]["waited"]["broadcast"] < delay / 4, results


def test_object_and_single_tensor_collectives():
    results = run_ranks(collective_extras.objects_and_single_tensors, 3)
    for r in results:
        assert r["everyone"] == [{"rank": i, "batches": 10 + i} for i in range(3)]
        assert r["config"] == {"lr": 0.1, "epochs": 3}
        assert r["all_gather_single"] == [1, 2, 3, 11, 12, 13, 21, 22, 23]
    assert [r["reduce_scatter_single"] for r in results] == [[33.0], [36.0], [39.0]]


def test_async_all_reduce_holds_the_sum_after_wait():
    results = run_ranks(collective_extras.async_all_reduce, 2)
    assert [(r["work"], r["sum"], r["completed"]) for r in results] == [("Work", 1.0, True)] * 2
    # 4 MB had not moved when the call returned, and moved later with no wait() call.
    assert [(r["done_at_return"], r["done_without_wait"]) for r in results] == [(False, True)] * 2
    # The second all-reduce was not done when asked at once, and was done when wait() returned.
    assert [(r["again_done_before_wait"], r["again_done_after_wait"]) for r in results] == [(False, True)] * 2
