import torch

from ddp_lib.demos import unused_drift
from ddp_lib.launch import run_ranks


def test_unused_head_leaves_gradients_unaveraged_and_ranks_apart():
    r0, r1 = run_ranks(unused_drift.first_step_unaveraged, 2)
    assert not torch.equal(r0["trunk_grad"], r1["trunk_grad"])
    assert not torch.equal(r0["trunk_weight"], r1["trunk_weight"])
