"""Lesson 03's checker, run on right answers written two ways and on answers it must refuse."""

import importlib
import textwrap

import pytest
import torch

from ddp_lib.exercises.lesson03 import check_device_worker, check_load_on_device

GOOD = '''
import os, torch
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    local_rank = int(os.environ["LOCAL_RANK"])
    with process_group(rank, world_size):
        use_gpu = torch.cuda.is_available()
        device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_gpu else torch.device("cpu")
        model = ToyModel().to(device)
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        ddp(torch.randn(20, 10).to(device)).sum().backward()
        torch.optim.SGD(ddp.parameters(), lr=0.01).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
'''

# The same work in the tutorial's own words: init_process_group by hand, the long names.
GOOD_BY_HAND = '''
import os
import torch
import torch.distributed
import torch.nn.parallel
from ddp_lib.workers.shared import ToyModel, param_checksum

def one_step(rank, world_size):
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}" if cuda else "cpu")
    torch.distributed.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    try:
        model = ToyModel().to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        loss = torch.nn.functional.mse_loss(ddp(torch.randn(20, 10).to(device)), torch.randn(20, 5).to(device))
        loss.backward()
        optimizer.step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
    finally:
        torch.distributed.destroy_process_group()
'''

# No DDP wrapper: the same two collectives written by hand, through other routes (a ProcessGroup
# method, a name imported from torch.distributed, distributed_c10d's ReduceOp), and SGD with momentum.
GOOD_WITHOUT_DDP = '''
import os, torch
import torch.distributed as dist
from torch.distributed import all_reduce
from torch.distributed.distributed_c10d import ReduceOp
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    local_rank = int(os.environ["LOCAL_RANK"])
    with process_group(rank, world_size) as device:
        model = ToyModel().to(device)
        for p in model.parameters():
            dist.group.WORLD.broadcast(p.data, 0).wait()
        model(torch.randn(20, 10).to(device)).sum().backward()
        for p in model.parameters():
            all_reduce(p.grad, op=ReduceOp.SUM)
            p.grad /= dist.get_world_size()
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
'''

# Answers that must be refused, with the words the report must contain.
WRONG = {
    "uses_rank": (GOOD.replace('os.environ["LOCAL_RANK"]', 'os.environ["RANK"]'),
                  "rank 2 (node 1) used local_rank 2, expected 0 (that is RANK: read LOCAL_RANK instead)"),
    "device_ids_on_cpu": (GOOD.replace('[device.index] if device.type == "cuda" else None', "[local_rank]"),
                          "with a CPU model pass device_ids=None"),
    "made_up_dict": ('import os\ndef one_step(rank, world_size):\n'
                     '    return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": 1.0}\n',
                     "never called a ToyModel"),
    "no_ddp": (GOOD.replace('ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)',
                            "ddp = model"), "fed its batch to weights that differ from rank 0's"),
    "ddp_without_a_backward": (GOOD.replace(".sum().backward()", ".sum()"),
                               "computed no gradient"),
    "ddp_backward_without_a_step": (GOOD.replace("torch.optim.SGD(ddp.parameters(), lr=0.01).step()", "pass"),
                                    "parameters did not change"),
    "another_learning_rate": (GOOD.replace("lr=0.01", "lr=0.1"), "learning rate of 0.1: use torch.optim.SGD(..., "
                                                                 "lr=0.01)"),
    "checksum_of_another_model": (GOOD.replace('"checksum": param_checksum(model)', '"checksum": 1.0'),
                                  "return param_checksum of that model"),
    # Right on 4 ranks only: the gradients summed, then divided by a hard-coded 4.
    "world_size_hard_coded": (GOOD_WITHOUT_DDP.replace("p.grad /= dist.get_world_size()", "p.grad /= 4"),
                              "divided by 4, a constant: divide by the world size"),
    "bad_return": (GOOD.replace('return {"local_rank"', 'return {"rank"'),
                   "return a dict with keys 'local_rank', 'device' and 'checksum'"),
}


def _write(tmp_path, monkeypatch, name, source):
    """Write a learner's file (as %%writefile would) and return its one_step."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return importlib.import_module(name).one_step


@pytest.mark.parametrize("name, source", [("good03_by_hand", GOOD_BY_HAND), ("good03_without_ddp", GOOD_WITHOUT_DDP)])
def test_right_answers_pass_on_both_layouts(name, source, tmp_path, monkeypatch):
    report = check_device_worker(_write(tmp_path, monkeypatch, name, source))
    assert report.passed and len(report.lines) == 2, str(report)
    assert report.lines[0].startswith("PASS 2 nodes x 2 ranks") and report.lines[1].startswith("PASS 1 node x 3 ranks")


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_answers_are_refused_with_the_reason(case, tmp_path, monkeypatch):
    source, message = WRONG[case]
    if case == "device_ids_on_cpu" and torch.cuda.is_available():
        pytest.skip("device_ids=[local_rank] is right on GPUs")
    report = check_device_worker(_write(tmp_path, monkeypatch, f"wrong03_{case}", source))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and message in fails[0], str(report)


# Exercise 4: load_on_device(path, device), two right answers and the mistakes a learner makes.
LOAD_GOOD = {
    "map_location_device": "def load_on_device(path, device):\n    return torch.load(path, map_location=device)\n",
    "map_location_string": ("def load_on_device(path, device):\n"
                            "    state = torch.load(path, map_location=str(device), weights_only=True)\n"
                            "    return dict(state)\n"),
}
LOAD_WRONG = {
    "no_map_location": ("def load_on_device(path, device):\n    return torch.load(path)\n",
                        "pass map_location=device to torch.load"),
    "cpu_written_in": ("def load_on_device(path, device):\n    return torch.load(path, map_location='cpu')\n",
                       "left tensors on cpu: pass map_location=device"),
    "model_not_state": ("def load_on_device(path, device):\n    torch.load(path, map_location=device)\n",
                        "returned NoneType: return the dict torch.load gives"),
}


def _load_fn(source):
    namespace = {"torch": torch}
    exec(source, namespace)
    return namespace["load_on_device"]


@pytest.mark.parametrize("case", sorted(LOAD_GOOD))
def test_load_on_device_right_answers_pass(case):
    report = check_load_on_device(_load_fn(LOAD_GOOD[case]))
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("case", sorted(LOAD_WRONG))
def test_load_on_device_mistakes_are_refused_with_the_fix(case):
    source, message = LOAD_WRONG[case]
    if case == "no_map_location" and torch.cuda.is_available():
        message = "left tensors on cuda:0: pass map_location=device"
    report = check_load_on_device(_load_fn(source))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and message in fails[0], str(report)
