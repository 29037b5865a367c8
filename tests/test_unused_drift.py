import torch

from ddp_lib.demos import unused_drift
from ddp_lib.launch import run_ranks


def test_unused_head_leaves_gradients_unaveraged_and_ranks_apart():
    r0, r1 = run_ranks(unused_drift.first_step_unaveraged, 2)
    assert r0["backward_returned"] is True and r1["backward_returned"] is True
    assert not torch.equal(r0["trunk_grad"], r1["trunk_grad"])
    assert not torch.equal(r0["trunk_weight"], r1["trunk_weight"])


def test_later_step_sends_the_buckets_before_the_unused_one_yet_leaves_grad_unaveraged():
    r0, r1 = run_ranks(unused_drift.later_step_unaveraged, 2, show_output=False)
    assert r0["allreduces_used"] == 3 and r0["allreduces_unused"] == 2
    assert not torch.equal(r0["trunk_grad"], r1["trunk_grad"])
    assert all(torch.equal(r["trunk_grad"], r["own_trunk_grad"]) for r in (r0, r1))


def test_with_bucket_views_the_buckets_that_started_average_grad_in_place():
    r0, r1 = run_ranks(unused_drift.later_step_unaveraged, 2, kwargs=dict(gradient_as_bucket_view=True),
                       show_output=False)
    assert r0["allreduces_unused"] == 2
    mean = (r0["own_trunk_grad"] + r1["own_trunk_grad"]) / 2
    assert torch.equal(r0["trunk_grad"], r1["trunk_grad"])
    assert all(torch.allclose(r["trunk_grad"], mean, rtol=0, atol=1e-6) for r in (r0, r1))
