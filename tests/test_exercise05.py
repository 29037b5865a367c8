"""Lesson 05's checker: a right answer passes, and the usual mistakes are named."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson05 import check_epoch_indices, find_problems

SOLUTIONS = {
    "good": """
        sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        out = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out""",
    "rank_from_the_process_group": """
        import torch.distributed as dist
        from torch.utils.data.distributed import DistributedSampler as Sampler
        dist.init_process_group("gloo")  # the launcher sets RANK, WORLD_SIZE and the rendezvous address
        try:
            sampler = Sampler(make_moons(), seed=seed)  # num_replicas and rank from the group
            out = []
            for epoch in range(epochs):
                sampler.set_epoch(epoch)
                out.append(list(sampler))
            return out
        finally:
            dist.destroy_process_group()""",
    "no_set_epoch": """
        sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed)
        return [list(sampler) for epoch in range(epochs)]""",
    "seed_per_rank": """
        sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed + rank)
        out = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out""",
    "new_seed_each_epoch": """
        out = []
        for epoch in range(epochs):
            sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, seed=seed + 7 * epoch)
            out.append(list(sampler))
        return out""",
    "hard_coded_two_ranks": """
        sampler = DistributedSampler(make_moons(), num_replicas=2, rank=rank % 2, seed=seed)
        out = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out""",
    "guessed_from_rank": """
        import random
        order = list(range(rank, 512, world_size))
        out = []
        for epoch in range(epochs):
            random.Random(seed + epoch).shuffle(order)
            out.append(list(order))
        return out""",
    "raises": """
        raise ValueError("not written yet")""",
}


def _solution(tmp_path, monkeypatch, name: str):
    body = textwrap.indent(textwrap.dedent(SOLUTIONS[name]).strip(), "    ")
    (tmp_path / f"ex05_{name}.py").write_text(
        "from torch.utils.data import DistributedSampler\nfrom ddp_lib.workers.shared import make_moons\n\n"
        f"def epoch_indices(rank, world_size, epochs, seed):\n{body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    return importlib.import_module(f"ex05_{name}").epoch_indices


@pytest.mark.parametrize("name", ["good", "rank_from_the_process_group"])
def test_checker_passes_a_correct_solution(tmp_path, monkeypatch, name):
    report = check_epoch_indices(_solution(tmp_path, monkeypatch, name))
    assert report.passed, str(report)
    assert [line[:17] for line in report.lines] == ["PASS world_size 2", "PASS world_size 4"]


@pytest.mark.parametrize("name, message", [
    ("no_set_epoch", "rank 0 reads the same order in epoch 1 as in epoch 0; call sampler.set_epoch(epoch)"),
    ("seed_per_rank", "epoch 0: ranks 0 and 1 both read sample"),
    ("raises", "raised ValueError: not written yet"),
    ("new_seed_each_epoch", "rank 0's order in epoch 1 is not DistributedSampler's"),
    ("hard_coded_two_ranks", "world_size 4: epoch 0: ranks 0 and 2 both read sample"),
    ("guessed_from_rank", "rank 0's order in epoch 0 is not DistributedSampler's"),
])
def test_checker_explains_wrong_solutions(tmp_path, monkeypatch, name, message):
    report = check_epoch_indices(_solution(tmp_path, monkeypatch, name))
    assert not report.passed and message in str(report), str(report)


def test_checker_logic_on_unshuffled_and_malformed_results():
    unshuffled = [[list(range(r, 8, 2)) for _ in range(2)] for r in range(2)]
    problems = find_problems(unshuffled, epochs=2, n_samples=8)
    assert "rank 0 reads samples in dataset order; create the sampler with shuffle=True" in problems
    assert find_problems([[[0, 2]], [[1]]], epochs=1, n_samples=4)[0].startswith("epoch 0: 1 samples (e.g. [3])")
    assert find_problems([None, [[1]]], epochs=1, n_samples=2)[0].startswith("rank 0 returned NoneType None")


def test_a_seed_copied_from_the_lesson_fails_when_the_seed_is_drawn(tmp_path, monkeypatch):
    fn = _solution(tmp_path, monkeypatch, "good")
    (tmp_path / "ex05_fixed_seed.py").write_text(
        "from ddp_lib.exercises.solutions.lesson05 import epoch_indices as right\n\n"
        "def epoch_indices(rank, world_size, epochs, seed):\n    return right(rank, world_size, epochs, 0)\n")
    fixed = importlib.import_module("ex05_fixed_seed").epoch_indices
    assert check_epoch_indices(fn, seed=5).passed
    report = check_epoch_indices(fixed, seed=5)
    assert not report.passed and "seed" in str(report), str(report)


def test_a_wrong_order_is_named_by_rank_epoch_and_position():
    from ddp_lib.exercises.lesson05 import _order_problems, _reference

    results = [[_reference(rank, 2, epoch, 7) for epoch in range(3)] for rank in range(2)]
    assert _order_problems(results, epochs=3, seed=7) == []
    results[1][2][5], results[1][2][6] = results[1][2][6], results[1][2][5]
    (problem,) = _order_problems(results, epochs=3, seed=7)
    assert problem.startswith("rank 1's order in epoch 2 is not DistributedSampler's") and "position 5" in problem
