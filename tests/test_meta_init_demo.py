"""Lesson 10's meta-device initialisation: shards only, filled within nn.Linear's bounds."""

from ddp_lib.demos.meta_init import meta_init
from ddp_lib.launch import run_ranks


def test_meta_model_is_sharded_then_filled_on_cpu():
    results = run_ranks(meta_init, 2, kwargs=dict(width=16, layers=2), show_output=False)
    full = results[0]["full_bytes"]
    assert full == 4 * (2 * (16 * 16 + 16) + 16 + 1)
    assert sum(r["local_bytes"] for r in results) == full  # the shards add up to the model, no copies
    for r in results:
        assert r["before"] == ["meta"] and r["after"] == ["cpu"]
        assert r["in_bounds"]
        assert r["halves_equal"]  # one seed on every rank: on CPU each rank draws the same numbers
        assert not r["halves_equal_seed_per_rank"]
        assert r["rng_warnings"] == ["DTensor random operators may not have complete support on cpu device mesh"]
