"""Lesson 04's slow wire (in ddp_lib/workers/buckets.py): its hook averages like DDP's own, and its
timings have the wire's floor."""

import pytest

from ddp_lib.launch import run_ranks
from ddp_lib.workers import buckets


@pytest.mark.parametrize("hold_until_last", [False, True])
def test_the_slow_wire_hook_averages_exactly_like_ddp(hold_until_last):
    diffs = run_ranks(buckets.slow_wire_gradients_match_default, 2, kwargs=dict(hold_until_last=hold_until_last),
                      show_output=False)
    assert diffs == [0.0, 0.0]


def test_every_way_is_timed_and_no_pass_beats_the_wire():
    r = run_ranks(buckets.overlap_on_slow_wire, 2, kwargs=dict(delay_ms=5.0, repeats=2, per_rank_batch=64),
                  show_output=False)[0]
    assert r["buckets"] == 4  # seven 256 KiB weights in 0.3 MiB buckets
    assert {way: len(times) for way, times in r["ms"].items()} == {"no_sync": 2, "overlap": 2, "after_backward": 2}
    # One wire sends the buckets one after another: a synchronised backward lasts at least buckets x delay.
    for way in ("overlap", "after_backward"):
        assert min(r["ms"][way]) >= r["buckets"] * r["delay_ms"]


def test_the_report_names_the_way_that_returned_first_or_says_noise():
    r = {"ms": {"no_sync": [50.0, 60, 70], "overlap": [200.0, 210, 220], "after_backward": [260.0, 270, 280]},
         "buckets": 4, "delay_ms": 40.0}
    lines = buckets.slow_wire_report(r)
    assert lines[3] == "the wire alone: 4 buckets x 40 ms = 160 ms"
    assert lines[5] == "verdict on this machine, now: overlap returned first, 60 ms earlier"
    assert lines[6].endswith("(give or take 10 ms): True")
    assert lines[7] == "round by round: overlap returned first in 3 of 3 rounds"
    r["ms"]["after_backward"] = [205.0, 215, 300]
    assert "within noise" in buckets.slow_wire_report(r)[5]
    assert buckets.slow_wire_report(r)[7] == "round by round: overlap returned first in 3 of 3 rounds"
    r["ms"]["after_backward"] = [100.0, 110, 120]
    assert buckets.slow_wire_report(r)[5].endswith("after backward returned first")
