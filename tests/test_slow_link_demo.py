"""Lesson 08's slow-link control: the counting hook sees 4 buckets at a 1 MiB cap and 1 at 25 MiB,
every round is timed, and the kept run has what the lesson reads."""

from ddp_lib.demos import slow_link
from ddp_lib.launch import run_ranks


def test_slow_link_steps_counts_buckets_and_times_each_round():
    results = run_ranks(slow_link.slow_link_steps, 2, kwargs=dict(rounds=2, link_bytes_per_s=1e9),
                        show_output=False)
    for r in results:
        assert r["buckets"] == {"small buckets": 4, "one bucket": 1}
        assert all(len(times) == 2 for times in r["step_ms"].values())
        assert r["first"] == {"small buckets": 1, "one bucket": 1}  # the order alternates


def test_kept_run_has_paired_rounds():
    kept = slow_link.kept_run()
    small, one = kept["step_ms"]["small buckets"], kept["step_ms"]["one bucket"]
    assert len(small) == len(one) >= 9
    assert kept["buckets"] == {"small buckets": 4, "one bucket": 1}
    assert abs(kept["first"]["small buckets"] - kept["first"]["one bucket"]) <= 1
