"""ddp_lib.bench.floor: the alpha-beta fit against the kept runs lesson 08 uses it on."""

from ddp_lib.bench import allreduce, ddp, floor, scaling, wide


def test_each_group_gets_a_computed_verdict_that_can_fail():
    text = floor.floor_verdict({"large messages": {"a": (1.1, 1.0), "b": (2.0, 1.0)},
                                "small messages": {"c": (7.0, 1.0), "d": (6.0, 1.0)}})
    lines = text.splitlines()
    assert lines[0] == "large messages: measured / model 1.1x and 2.0x; the model within 25% of each: False"
    assert lines[1:3] == ["  a: measured 1.10 ms, the model 1.00 ms (1.1x)",
                          "  b: measured 2.00 ms, the model 1.00 ms (2.0x)"]
    assert lines[3] == ("small messages: measured / model 7.0x and 6.0x; the model within 25% of each: False; "
                        "the model underestimates them about 6.5x on this machine: for them it is a floor")


def test_the_model_within_its_tolerance_either_way():
    assert floor.floor_verdict({"large messages": {"a": (1.2, 1.0), "b": (0.8, 1.0)}}).splitlines()[0].endswith(
        "within 25% of each: True")
    # 30% shorter than the model is outside the tolerance too: the verdict is not a one-sided bound
    assert floor.floor_verdict({"large messages": {"a": (0.7, 1.0)}}).splitlines()[0].endswith(
        "within 25% of each: False; the model overestimates them about 1.4x")
    assert "overestimates them about 3.3x" in floor.floor_verdict({"small messages": {"a": (0.3, 1.0)}})
    # a group with one use near the model and one far: no "about Nx", which would hide the near one
    assert "about" not in floor.floor_verdict({"small messages": {"a": (1.1, 1.0), "b": (7.0, 1.0)}})


def test_the_overhead_group_gets_no_verdict_on_the_fit():
    text = floor.floor_verdict({floor.OVERHEAD: {"a": (4.0, 1.0)}})
    assert text.splitlines()[0] == (f"{floor.OVERHEAD}: 4.0x one modelled all-reduce; "
                                    "outside the model: it has no term for this time")
    assert "floor" not in text and "within" not in text


def test_the_kept_uses_split_into_modelled_messages_near_the_fit_and_overhead_beyond_it():
    full = allreduce.full_run()
    alpha, beta = allreduce.held_fit(full)
    uses = floor.fit_uses(alpha, beta, full, ddp.full_run(), scaling.full_run(), wide.full_run())
    assert list(uses) == [floor.LARGE, floor.SMALL, floor.OVERHEAD]
    assert [len(group) for group in uses.values()] == [2, 2, 1]
    # bare all-reduces, large and small, both came within the fit's tolerance
    assert all(floor.within(*use) for use in uses[floor.LARGE].values())
    assert all(floor.within(*use) for use in uses[floor.SMALL].values())
    assert list(uses[floor.SMALL]) == ["a bare all-reduce of 256 B", "a bare all-reduce of 1024 B"]
    # the moons model's extra step took several modelled all-reduces: overhead the model has no term for
    (measured, predicted), = uses[floor.OVERHEAD].values()
    assert measured > 2 * predicted
