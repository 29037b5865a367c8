"""The ring all-reduce from point-to-point calls, against dist.all_reduce, on 2, 3 and 4 ranks."""

import sys

import pytest

import ring_workers
from ddp_lib.launch import run_ranks
from ddp_lib.workers.ring import ring_bytes_expected, ring_check, ring_steps


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("numel", [0, 1, 2, 7, 1001])
def test_ring_equals_all_reduce(world_size, numel):
    results = run_ranks(ring_check, world_size, (numel, 3))
    assert all(r["equal"] for r in results), results
    sent = [r["bytes_sent"] for r in results]
    # Every chunk crosses N-1 links in each phase: 2 (N-1) tensor sizes in all, N of them per rank on average.
    assert sum(sent) == 2 * (world_size - 1) * numel * 4
    # Uneven chunks differ by at most one element, so no rank is more than 2 (N-1) elements off the mean.
    assert all(abs(s - ring_bytes_expected(numel, world_size)) <= 2 * (world_size - 1) * 4 for s in sent)
    if sys.platform == "linux":  # gloo's own all_reduce writes 2 (N-1)/N times the tensor to its sockets too
        assert all(abs(r["gloo_written"] - 2 * (world_size - 1) / world_size) <= 0.01 for r in results), results
        # gloo's reduce_scatter all-reduces every piece: it writes as much as the all_reduce, not half
        assert all(abs(r["gloo_reduce_scatter_written"] - r["gloo_written"]) <= 0.02 for r in results), results


@pytest.mark.parametrize("world_size", [3, 4])
def test_ring_exact_on_integers_of_any_shape(world_size):
    results = run_ranks(ring_workers.ring_int64_2d, world_size, ((3, 5),))
    for ours, reference in results:
        assert ours == reference


def test_ring_in_a_subgroup():
    results = run_ranks(ring_workers.ring_in_subgroup, 4)
    assert results == [None, [4.0] * 5, None, [4.0] * 5]


def test_ring_steps_end_with_the_sum_everywhere():
    results = run_ranks(ring_steps, 3)
    for r in results:
        assert len(r["history"]) == 2 * (3 - 1) + 1
        assert r["history"][-1] == [33.0, 36.0, 39.0]


def test_bytes_formula():
    assert ring_bytes_expected(1000, 4) == 6000.0
    assert ring_bytes_expected(1000, 2) == 4000.0
