"""Lesson 04's checker on real ranks: two right answers written differently from the solution
pass on 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer

from ddp_lib.exercises.lesson04 import check_average_gradients
from ddp_lib.exercises.solutions import lesson04 as solution

HEAD = """
import torch
import torch.distributed as dist

def average_gradients(model):
"""
RIGHT = {
    "one_flat_async_all_reduce": """
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, async_op=True).wait()
    flat /= dist.get_world_size()
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))
""",
    "handles_waited_after_the_loop": """
    handles = [dist.all_reduce(p.grad, async_op=True) for p in model.parameters()]
    for handle in handles:
        handle.wait()
    for p in model.parameters():
        p.grad.div_(dist.get_world_size())
""",
}
WRONG = {
    "all_reduce_of_a_temporary": ("""
    for p in model.parameters():
        dist.all_reduce(p.grad / dist.get_world_size())
""", "FAIL world_size 2", "collectives work in place on the tensor passed"),
    "no_wait": ("""
    for p in model.parameters():
        p.grad /= dist.get_world_size()
        dist.all_reduce(p.grad, async_op=True)
""", "FAIL world_size 2", "call .wait() on the Work it returns"),
    "constant_divisor": ("""
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2
""", "FAIL world_size 3", "the sum divided by 2, a constant: divide by dist.get_world_size()"),
    "sum_not_mean": ("""
    for p in model.parameters():
        dist.all_reduce(p.grad)
""", "FAIL world_size 2", "all_reduce sums, so divide by world_size"),
    "no_collective": ("""
    pass
""", "FAIL world_size 2", "no collective ran"),
}


def test_the_solution_passes():
    assert check_average_gradients(solution.average_gradients, world_sizes=(2,)).passed


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right04_{case}", HEAD + RIGHT[case], "average_gradients")
    report = check_average_gradients(answer)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, refusal, hint = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong04_{case}", HEAD + body, "average_gradients")
    report = check_average_gradients(answer, world_sizes=(3,) if "3" in refusal else (2,))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal) and hint in fails[0], str(report)
