"""Lesson 01's late rank in each collective, and two ranks that call collectives in different
orders, on real gloo groups."""

import pytest

import ddp_lib.mp
from ddp_lib.demos import late_collectives


def test_the_data_decides_who_waits_for_a_late_rank():
    delay = 0.4
    results = ddp_lib.mp.spawn(late_collectives.late_in_each, args=(4, delay), nprocs=4)
    waited = {name: [r["rank"] for r in results[:-1] if r["waited"][name] > delay / 2]
              for name in late_collectives.COLLECTIVES}
    for name in ("barrier", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert waited[name] == [0, 1, 2], name
    assert waited["gather"] == [0] and waited["scatter"] == [0]


def test_collectives_in_different_orders_time_out_on_every_rank():
    for r in ddp_lib.mp.spawn(late_collectives.wrong_order, args=(2, 1.0), nprocs=2):
        name, outcome = r["calls"][0]
        assert name == ("all_reduce" if r["rank"] == 0 else "broadcast")
        assert "Timed out" in outcome and r["seconds"] >= 1.0


def test_an_unknown_collective_is_named():
    with pytest.raises(ValueError, match="name='allreduce'"):
        late_collectives.call("allreduce", 0, 1)
