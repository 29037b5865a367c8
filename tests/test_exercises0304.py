"""The checker of lesson 04, run on a right solution and on wrong ones (lesson 03's: test_exercise03.py)."""

import importlib
import textwrap

import pytest

from ddp_lib.exercises.lesson04 import check_average_gradients

GOOD_04 = '''
import torch.distributed as dist

def average_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
'''

WRONG_04 = {
    "no_division": (GOOD_04.replace("        p.grad /= dist.get_world_size()\n", ""),
                    "every gradient is 2 times too large: all_reduce sums, so divide by world_size"),
    "nothing": ("def average_gradients(model):\n    pass\n",
                "the gradients are unchanged: each rank still has only its own; all_reduce them"),
    "reduce": (GOOD_04.replace("dist.all_reduce(p.grad)", "dist.reduce(p.grad, dst=0)"),
               "rank 0 is right but rank(s) [1] are not"),
    "first_only": (GOOD_04.replace("for p in model.parameters():", "for p in list(model.parameters())[:1]:"),
                   "these parameters do not hold the average: 0.bias, 2.weight, 2.bias, 4.weight, 4.bias"),
    "zeroes": ("def average_gradients(model):\n    model.zero_grad()\n",
               "the gradients are gone (.grad is None)"),
    "raises": ("def average_gradients(model):\n    raise ValueError('not written yet')\n",
               "raised ValueError: not written yet"),
}


def _write(tmp_path, monkeypatch, name, source, function):
    """Write a learner's file (as %%writefile would) and return its function."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return getattr(importlib.import_module(name), function)


def test_lesson04_checker_accepts_a_right_solution(tmp_path, monkeypatch):
    report = check_average_gradients(_write(tmp_path, monkeypatch, "good04", GOOD_04, "average_gradients"))
    assert report.lines == ["PASS on all 2 ranks, all 6 gradients equal DDP's (within 1e-06)"]


@pytest.mark.parametrize("case", sorted(WRONG_04))
def test_lesson04_checker_explains_wrong_solutions(case, tmp_path, monkeypatch):
    source, message = WRONG_04[case]
    report = check_average_gradients(_write(tmp_path, monkeypatch, f"wrong04_{case}", source, "average_gradients"))
    assert not report.passed and message in str(report), str(report)
