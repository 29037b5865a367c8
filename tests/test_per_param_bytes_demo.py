"""Lesson 10's two per-parameter costs: Adam's foreach temporary and autocast's saved bfloat16 weights."""

import pytest

from ddp_lib.demos.per_param_bytes import per_parameter_costs, per_parameter_costs_in_a_rank


def test_the_two_costs_are_the_tables_4_and_2_bytes():
    assert per_parameter_costs() == {"adam_step": 4.0, "saved_copies": 2.0, "first_layer_saved": False}
    assert per_parameter_costs(width=64, layers=2)["saved_copies"] == 2.0


def test_bad_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="layers at least 2"):
        per_parameter_costs(layers=1)


def test_the_worker_form_passes_its_sizes_on():
    assert per_parameter_costs_in_a_rank(0, 4, width=64, layers=2) == per_parameter_costs(width=64, layers=2)
