"""Lesson 00's checker on real ranks: two right answers written differently from the solution
pass on 1, 2 and 3 ranks; each mistake learners make is refused with its fix named."""

import pytest
from answer_files import load_answer

from ddp_lib.exercises.lesson00 import check_loss_runs, check_who_am_i
from ddp_lib.exercises.solutions import lesson00 as solution

HEAD = """
import torch.distributed as dist
from ddp_lib.process_group import process_group

def who_am_i(rank, world_size, name):
    with process_group(rank, world_size):
"""
RIGHT = {
    "asks_the_group": """
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, name)
        return dict(rank=dist.get_rank(), world_size=dist.get_world_size(), is_main=dist.get_rank() == 0,
                    everyone=tuple(everyone))
""",
    "broadcast_from_each": """
        everyone = []
        for source in range(world_size):
            box = [name if source == rank else None]
            dist.broadcast_object_list(box, src=source)
            everyone.append(box[0])
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""",
}
WRONG = {
    "hard_coded_list_length": ("""
        everyone = [None, None]
        dist.all_gather_object(everyone, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 3: rank 0 raised IndexError", "use world_size ([None] * world_size)"),
    "gather_object_alone": ("""
        everyone = [None] * world_size if rank == 0 else None
        dist.gather_object(name, everyone, dst=0)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 2: rank 1 has no list of names", "all_gather_object gives it to every rank"),
    "kept_the_return_value": ("""
        everyone = dist.all_gather_object([None] * world_size, name)
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": everyone}
""", "FAIL world_size 2: rank 0 returned everyone=None", "fills the list you pass it in place"),
    "no_collective": ("""
        return {"rank": rank, "world_size": world_size, "is_main": rank == 0, "everyone": [name] * world_size}
""", "FAIL world_size 2: no collective ran", "dist.all_gather_object"),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_right_answers_pass(case, tmp_path, monkeypatch):
    answer = load_answer(tmp_path, monkeypatch, f"right00_{case}", HEAD + RIGHT[case], "who_am_i")
    report = check_who_am_i(answer)
    assert report.passed, str(report)
    assert len(report.lines) == 3


def test_the_solution_passes_on_two_ranks():
    assert check_who_am_i(solution.who_am_i, world_sizes=(2,)).passed


@pytest.mark.parametrize("case", sorted(WRONG))
def test_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch):
    body, refusal, hint = WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong00_{case}", HEAD + body, "who_am_i")
    report = check_who_am_i(answer, world_sizes=(2, 3) if "IndexError" in refusal else (2,))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal) and hint in fails[0], str(report)


# Exercise 1: the fixed file's demo_basic, returning its loss too. The answers meet on a free port that the
# test sets in MASTER_PORT (the ranks inherit it), not on the fixed file's 12355.
LOSS_HEAD = """
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))

def demo_basic(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    ddp_model = DDP(ToyModel())
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss = nn.MSELoss()(outputs, labels)
    loss.backward()
    optimizer.step()
    parameters = torch.cat([p.detach().flatten() for p in ddp_model.module.parameters()])
"""
LOSS_RIGHT = {
    "tuple_of_floats": """
    dist.destroy_process_group()
    return round(loss.item(), 4), parameters.tolist()
""",
    "dict_of_tensors": """
    dist.destroy_process_group()
    return {"parameters": parameters, "loss": loss.detach()}
""",
}
LOSS_WRONG = {
    "parameters_only": ("""
    dist.destroy_process_group()
    return parameters.tolist()
""", "FAIL world_size 1: rank 0 returned a list of 165 numbers only", "return the loss and the parameters"),
    "loss_after_step": ("""
    after = nn.MSELoss()(ddp_model(torch.randn(20, 10)), labels)
    dist.destroy_process_group()
    return after.item(), parameters.tolist()
""", "FAIL world_size 1: rank 0 returned the loss", "before optimizer.step()"),
    "averaged_loss": ("""
    total = loss.detach().clone()
    dist.all_reduce(total)
    dist.destroy_process_group()
    return total.item() / world_size, parameters.tolist()
""", "FAIL world_size 2: rank 0 returned the loss", "the mean of the ranks' losses"),
    "parameters_before_step": ("""
    grads = torch.cat([p.grad.flatten() for p in ddp_model.module.parameters()])
    before = parameters + 0.001 * grads  # undoes the SGD step: the parameters as they were before it
    dist.destroy_process_group()
    return round(loss.item(), 4), before.tolist()
""", "FAIL world_size 1: rank 0 returned the parameters as they were before optimizer.step()",
        "return them after optimizer.step()"),
}


@pytest.fixture
def free_master_port(monkeypatch):
    from ddp_lib.process_group import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))


@pytest.mark.parametrize("case", sorted(LOSS_RIGHT))
def test_loss_right_answers_pass(case, tmp_path, monkeypatch, free_master_port):
    answer = load_answer(tmp_path, monkeypatch, f"right00_loss_{case}", LOSS_HEAD + LOSS_RIGHT[case], "demo_basic")
    report = check_loss_runs(answer)
    assert report.passed, str(report)
    assert "rank 0 1.4909" in report.lines[0] and "(the same: True)" in report.lines[2], str(report)


@pytest.mark.parametrize("case", sorted(LOSS_WRONG))
def test_loss_mistakes_are_named_with_their_fix(case, tmp_path, monkeypatch, free_master_port):
    body, refusal, hint = LOSS_WRONG[case]
    answer = load_answer(tmp_path, monkeypatch, f"wrong00_loss_{case}", LOSS_HEAD + body, "demo_basic")
    report = check_loss_runs(answer)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and fails[0].startswith(refusal) and hint in fails[0], str(report)


def test_the_loss_solution_passes(free_master_port):
    report = check_loss_runs(solution.demo_basic)
    assert report.passed, str(report)


def test_a_busy_port_is_named_as_the_cause_with_the_lesson_section(tmp_path, monkeypatch, free_master_port):
    import os
    import socket

    answer = load_answer(tmp_path, monkeypatch, "right00_loss_busy_port", LOSS_HEAD + LOSS_RIGHT["tuple_of_floats"],
                         "demo_basic")
    with socket.socket() as holder:  # another process's store, as a leftover job's rank 0 would hold it
        holder.bind(("127.0.0.1", int(os.environ["MASTER_PORT"])))
        holder.listen()
        report = check_loss_runs(answer)
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert fails and "EADDRINUSE" in fails[0] and "another process holds that port" in fails[0], str(report)
    assert "Address already in use" in fails[0], str(report)
