"""Lesson 05's checker: right answers pass however they are written, and the usual mistakes, answers
that hard-code the number of epochs or ranks, and answers that look for the expected values in the
rank's own process, are refused."""

from __future__ import annotations

import importlib
import random
import textwrap

import pytest

from ddp_lib.exercises.lesson05 import EPOCH_CHOICES, check_epoch_indices, draw_plan, find_problems

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
            # gloo: a rank that destroys its group while another is still connecting to it breaks
            # that rank's start-up ("connectFullMesh failed"); a barrier first lets every rank finish
            dist.barrier()
            return out
        finally:
            dist.destroy_process_group()""",
    "data_loader_batches": """
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler as Sampler
        dataset = make_moons()
        sampler = Sampler(list(range(len(dataset))), world_size, rank, seed=seed)
        loader = DataLoader(list(range(len(dataset))), batch_size=10, sampler=sampler)
        out = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            out.append([int(i) for batch in loader for i in batch])
        return out""",
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
    "three_epochs_always": """
        sampler = DistributedSampler(make_moons(), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        out = []
        for epoch in range(3):
            sampler.set_epoch(epoch)
            out.append(list(sampler))
        return out""",
    "permutation_sliced_without_padding": """
        import torch
        out = []
        for epoch in range(epochs):
            order = torch.randperm(512, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
            out.append(order[rank::world_size])
        return out""",
    "looked_for_in_frames_and_gc": """
        import gc, sys
        found = []
        frame = sys._getframe(1)
        while frame is not None:
            found += [v for v in frame.f_locals.values() if isinstance(v, list) and len(v) == epochs]
            frame = frame.f_back
        found += [o for o in gc.get_objects() if isinstance(o, list) and len(o) == epochs
                  and all(isinstance(e, list) and len(e) > 100 for e in o)]
        return found[0] if found else [[] for _ in range(epochs)]""",
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


@pytest.mark.parametrize("name", ["good", "rank_from_the_process_group", "data_loader_batches"])
def test_checker_passes_a_correct_solution(tmp_path, monkeypatch, name):
    report = check_epoch_indices(_solution(tmp_path, monkeypatch, name))
    assert report.passed, str(report)
    assert [line[:17] for line in report.lines[:1]] == ["PASS world_size 2"]
    assert report.lines[1][:17] in ("PASS world_size 3", "PASS world_size 5"), str(report)
    assert "but the 1 the sampler repeats" in str(report) or "but the 3 the sampler repeats" in str(report)


def test_each_check_draws_two_world_sizes_and_distinct_epoch_counts():
    plans = [draw_plan(random.Random(i)) for i in range(40)]
    for plan in plans:
        (first, first_epochs), (second, second_epochs) = plan
        assert first == 2 and 512 % second != 0, plan  # the second pads: 512 divides by neither 3 nor 5
        assert first_epochs != second_epochs and {first_epochs, second_epochs} <= set(EPOCH_CHOICES), plan
    assert {p[1][0] for p in plans} == {3, 5} and len({tuple(p) for p in plans}) > 5  # it varies


@pytest.mark.parametrize("name, message", [
    ("no_set_epoch", "rank 0 reads the same order in epoch 1 as in epoch 0; call sampler.set_epoch(epoch)"),
    ("seed_per_rank", "epoch 0: ranks 0 and 1 both read sample"),
    ("raises", "raised ValueError: not written yet"),
    ("new_seed_each_epoch", "rank 0's order in epoch 1 is not DistributedSampler's"),
    ("hard_coded_two_ranks", "reads 256 samples in epoch 0; DistributedSampler gives every one of"),
    ("guessed_from_rank", "rank 0's order in epoch 0 is not DistributedSampler's"),
    # the two world sizes get different numbers of epochs: a fixed 3 is wrong in at least one
    ("three_epochs_always", "lists, one for each of the `epochs` it was given"),
    # right on 2 ranks; on 3 or 5 the sampler pads, and a plain slice gives some ranks one sample fewer
    ("permutation_sliced_without_padding", "(it repeats"),
    # nothing in a rank's process holds the expected order: it is computed in the parent afterwards
    ("looked_for_in_frames_and_gc", "world_size 2, "),
])
def test_checker_explains_wrong_solutions(tmp_path, monkeypatch, name, message):
    report = check_epoch_indices(_solution(tmp_path, monkeypatch, name))
    assert not report.passed and message in str(report), str(report)


def test_checker_logic_on_unshuffled_and_malformed_results():
    unshuffled = [[list(range(r, 8, 2)) for _ in range(2)] for r in range(2)]
    problems = find_problems(unshuffled, epochs=2, n_samples=8)
    assert "rank 0 reads samples in dataset order; create the sampler with shuffle=True" in problems
    # 10 samples on 4 ranks, as the lesson shows them: samples 0 and 1 are read twice, and that is right
    padded = [[[0, 4, 8], [3, 5, 9]], [[1, 5, 9], [2, 6, 0]], [[2, 6, 0], [1, 7, 8]], [[3, 7, 1], [4, 0, 1]]]
    assert find_problems(padded, epochs=2, n_samples=10)[0] == \
        "rank 0 reads samples in dataset order; create the sampler with shuffle=True"
    padded[3][1] = [5, 0, 5]  # a third repeat where padding makes two (and sample 4 is read by nobody)
    assert find_problems(padded, epochs=2, n_samples=10)[0].startswith("epoch 1: ranks 0 and 3 both read sample 5 "
                                                                       "(3 repeats where padding makes 2)")
    assert find_problems([[[0, 2]], [[1, 7]]], epochs=1, n_samples=4)[0].startswith("epoch 0: 1 samples (e.g. [3])")
    assert find_problems([[[0, 2]], [[1]]], epochs=1, n_samples=4)[0].startswith("rank 1 reads 1 samples in epoch 0")
    assert find_problems([None, [[1]]], epochs=1, n_samples=2)[0].startswith("rank 0 returned NoneType None")


def test_a_seed_copied_from_the_lesson_fails_when_the_seed_is_drawn(tmp_path, monkeypatch):
    fn = _solution(tmp_path, monkeypatch, "good")
    (tmp_path / "ex05_fixed_seed.py").write_text(
        "from ddp_lib.exercises.solutions.lesson05 import epoch_indices as right\n\n"
        "def epoch_indices(rank, world_size, epochs, seed):\n    return right(rank, world_size, epochs, 0)\n")
    fixed = importlib.import_module("ex05_fixed_seed").epoch_indices
    plan = [(2, 3)]
    assert check_epoch_indices(fn, plan, seed=5).passed
    report = check_epoch_indices(fixed, plan, seed=5)
    assert not report.passed and "seed" in str(report), str(report)


def test_a_wrong_order_is_named_by_rank_epoch_and_position():
    from ddp_lib.exercises.lesson05 import _order_problems, _reference

    results = [[_reference(rank, 2, epoch, 7) for epoch in range(3)] for rank in range(2)]
    assert _order_problems(results, epochs=3, seed=7) == []
    results[1][2][5], results[1][2][6] = results[1][2][6], results[1][2][5]
    (problem,) = _order_problems(results, epochs=3, seed=7)
    assert problem.startswith("rank 1's order in epoch 2 is not DistributedSampler's") and "position 5" in problem
