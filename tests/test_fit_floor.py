"""ddp_lib.bench.floor: the alpha-beta fit against the kept runs lesson 08 uses it on."""

from ddp_lib.bench import allreduce, ddp, floor, overlap, scaling, wide


def test_floor_verdict_counts_the_uses_whose_measured_time_was_longer():
    text = floor.floor_verdict({"a": (2.0, 1.0), "b": (0.5, 1.0)})
    assert "a: measured 2.00 ms, the model 1.00 ms (2.0x)" in text
    assert text.splitlines()[-1] == ("measured longer than the fit in 1 of 2 uses; "
                                     "none more than 25% shorter, so the fit a lower bound within its tolerance: False")
    assert floor.floor_verdict({"a": (2.0, 1.0)}).endswith("in 1 of 1 uses; none more than 25% shorter, "
                                                          "so the fit a lower bound within its tolerance: True")
    # 10% shorter than the model is within the fit's own tolerance: still at the bound
    assert floor.floor_verdict({"a": (0.9, 1.0)}).endswith("in 0 of 1 uses; none more than 25% shorter, "
                                                          "so the fit a lower bound within its tolerance: True")


def test_every_kept_use_of_the_fit_is_at_or_above_the_model_within_its_tolerance():
    full = allreduce.full_run()
    alpha, beta = allreduce.held_fit(full)
    uses = floor.fit_uses(alpha, beta, ddp.full_run(), overlap.full_run(), scaling.full_run(), wide.full_run())
    assert len(uses) == 4
    assert all(measured >= (1 - floor.TOLERANCE) * predicted > 0 for measured, predicted in uses.values())
    # the extra bucket is priced at one alpha
    assert uses["one extra bucket, under the profiler"][1] == alpha * 1e3
