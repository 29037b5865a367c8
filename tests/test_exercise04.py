"""Lesson 04's checkers. Exercise 1, on real ranks: two right answers written differently from the solution
pass on 2 and 3 ranks; each mistake learners make is refused with its fix named. Exercise 2, on real ranks:
the same for gradient accumulation with no_sync(). Exercise 3, in this process: the same for the parameters
a backward would not reach."""

import pytest
from answer_files import load_answer, notebook_stub

from ddp_lib.exercises.lesson04 import check_accumulate_step, check_average_gradients, check_unreached_parameters
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


# Exercise 2's accumulation, on 2 ranks: one all-reduce per optimizer step, parameters equal to one process.

ACCUMULATE_HEAD = """
import contextlib
from torch import nn

def accumulate_step(ddp_model, optimizer, micro_batches):
"""
ACCUMULATE_RIGHT = {
    "early_ones_in_one_no_sync_block": """
    *early, (x_last, y_last) = micro_batches
    optimizer.zero_grad()
    with ddp_model.no_sync():
        for x, y in early:
            (nn.functional.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    (nn.functional.mse_loss(ddp_model(x_last), y_last) / len(micro_batches)).backward()
    optimizer.step()
""",
    "summed_loss_over_every_entry": """
    total = sum(y.numel() for _, y in micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        skip = ddp_model.no_sync() if i < len(micro_batches) - 1 else contextlib.nullcontext()
        with skip:
            nn.functional.mse_loss(ddp_model(x), y, reduction="sum").div(total).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
""",
}
ACCUMULATE_WRONG = {
    "forward_before_no_sync": ("""
    for i, (x, y) in enumerate(micro_batches):
        loss = nn.functional.mse_loss(ddp_model(x), y) / len(micro_batches)
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp_model.no_sync():
            loss.backward()
    optimizer.step()
    optimizer.zero_grad()
""", "run the forward inside no_sync() too"),
    "loss_not_divided": ("""
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp_model.no_sync():
            nn.functional.mse_loss(ddp_model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()
""", "divide each micro-batch's loss by the number of micro-batches"),
    "every_one_in_no_sync": ("""
    with ddp_model.no_sync():
        for x, y in micro_batches:
            (nn.functional.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()
""", "run the last micro-batch outside no_sync()"),
    "no_zero_grad": ("""
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp_model.no_sync():
            (nn.functional.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
    optimizer.step()
""", "call optimizer.zero_grad()"),
    "step_after_each": ("""
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else ddp_model.no_sync():
            (nn.functional.mse_loss(ddp_model(x), y) / len(micro_batches)).backward()
        optimizer.step()
    optimizer.zero_grad()
""", "call optimizer.step() once"),
}


def test_accumulate_solution_passes_and_stub_fails(tmp_path, monkeypatch):
    assert check_accumulate_step(solution.accumulate_step).passed
    stub = load_answer(tmp_path, monkeypatch, "stub04_accumulate",
                       notebook_stub("04_gradient_sync.ipynb", "my_work/lesson04_accumulate.py"), "accumulate_step")
    report = check_accumulate_step(stub)
    assert not report.passed and "NotImplementedError" in str(report), str(report)


@pytest.mark.parametrize("case", sorted(ACCUMULATE_RIGHT))
def test_accumulate_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right04a_{case}", ACCUMULATE_HEAD + ACCUMULATE_RIGHT[case],
                         "accumulate_step")
    report = check_accumulate_step(answer)
    assert report.passed and len(report.lines) == 1, str(report)


@pytest.mark.parametrize("case", sorted(ACCUMULATE_WRONG))
def test_accumulate_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, hint = ACCUMULATE_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong04a_{case}", ACCUMULATE_HEAD + body, "accumulate_step")
    report = check_accumulate_step(answer)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and hint in fails[0], str(report)


# Exercise 3's graph walk, checked in this process: the parameters a backward from the output would not reach.

UNREACHED_HEAD = """
import torch

def unreached_parameters(output, parameters):
"""
UNREACHED_RIGHT = {
    "recursive_walk": """
    reached, seen = set(), set()

    def visit(node):
        if node is None or node in seen:
            return
        seen.add(node)
        if type(node).__name__ == "AccumulateGrad":
            reached.add(node.variable)
        for child, _ in node.next_functions:
            visit(child)

    visit(output.grad_fn)
    return {p for p in parameters if p not in reached}
""",
    "list_compared_with_is": """
    reached, stack = [], [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            if hasattr(node, "variable"):
                reached.append(node.variable)
            stack.extend(child for child, _ in node.next_functions)
    return [p for p in parameters if not any(p is r for r in reached)]
""",
    "autograd_grad_allow_unused": """
    grads = torch.autograd.grad(output.sum(), parameters, allow_unused=True, retain_graph=True)
    return [p for p, g in zip(parameters, grads) if g is None]
""",
}
UNREACHED_WRONG = {
    "reads_grad_before_backward": ("""
    return [p for p in parameters if p.grad is None]
""", "before backward every .grad is None"),
    "first_level_only": ("""
    reached = {id(node.variable) for node, _ in output.grad_fn.next_functions if hasattr(node, "variable")}
    return [p for p in parameters if id(p) not in reached]
""", "keep walking the next_functions of every node you meet"),
    "no_none_check": ("""
    reached, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if hasattr(node, "variable"):
            reached.add(id(node.variable))
        stack.extend(child for child, _ in node.next_functions)
    return [p for p in parameters if id(p) not in reached]
""", "skip a None node"),
    "returns_the_reached": ("""
    reached, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            if hasattr(node, "variable"):
                reached.add(id(node.variable))
            stack.extend(child for child, _ in node.next_functions)
    return [p for p in parameters if id(p) in reached]
""", "return the others, those NOT reached"),
    "tensor_in_a_list": ("""
    reached, stack = [], [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None:
            if hasattr(node, "variable"):
                reached.append(node.variable)
            stack.extend(child for child, _ in node.next_functions)
    return [p for p in parameters if p not in reached]
""", "compare parameters by identity"),
    "returns_names": ("""
    return [str(i) for i, p in enumerate(parameters)]
""", "return the parameter tensors themselves"),
}


def test_unreached_solution_passes_and_stub_fails(tmp_path, monkeypatch):
    assert check_unreached_parameters(solution.unreached_parameters).passed
    stub = load_answer(tmp_path, monkeypatch, "stub04_unreached",
                       notebook_stub("04_gradient_sync.ipynb", "my_work/lesson04_unreached.py"), "unreached_parameters")
    report = check_unreached_parameters(stub)
    assert not report.passed and "NotImplementedError" in str(report), str(report)


@pytest.mark.parametrize("case", sorted(UNREACHED_RIGHT))
def test_unreached_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right04u_{case}", UNREACHED_HEAD + UNREACHED_RIGHT[case],
                         "unreached_parameters")
    report = check_unreached_parameters(answer)
    assert report.passed and len(report.lines) == 4, str(report)


@pytest.mark.parametrize("case", sorted(UNREACHED_WRONG))
def test_unreached_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, hint = UNREACHED_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong04u_{case}", UNREACHED_HEAD + body, "unreached_parameters")
    report = check_unreached_parameters(answer)
    assert not report.passed and hint in str(report), str(report)
