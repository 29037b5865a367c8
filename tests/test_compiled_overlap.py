"""Lesson 09's compiled_overlap: under aot_eager, DDP's all-reduces start during a compiled backward
only with dynamo's DDP graph split on."""

from ddp_lib.demos.compiled_overlap import allreduces_during_backward
from ddp_lib.launch import run_ranks


def test_the_split_lets_allreduces_start_during_backward():
    for r in run_ranks(allreduces_during_backward, 2, show_output=False):
        on, off = r["optimize_ddp=True"], r["optimize_ddp=False"]
        assert on["backward_graphs"] == on["allreduces"] == 3 and on["started_during_backward"] == 2
        assert off["backward_graphs"] == 1 and off["allreduces"] == 3 and off["started_during_backward"] == 0
