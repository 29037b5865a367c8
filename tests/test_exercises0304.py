"""The checker of lesson 03, run on a right solution and on wrong ones (lesson 04's: test_exercise04.py)."""

import importlib
import textwrap

import pytest
import torch

from ddp_lib.exercises.lesson03 import check_device_worker

GOOD_03 = '''
import os, torch
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_lib.models import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    local_rank = int(os.environ["LOCAL_RANK"])
    with process_group(rank, world_size):
        use_gpu = torch.cuda.is_available() and local_rank < torch.cuda.device_count()
        device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")
        model = ToyModel().to(device)
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        ddp(torch.randn(20, 10).to(device)).sum().backward()
        torch.optim.SGD(ddp.parameters(), lr=0.1).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
'''

WRONG_03 = {
    "uses_rank": (GOOD_03.replace('os.environ["LOCAL_RANK"]', 'os.environ["RANK"]'),
                  "rank 2 (node 1) used local_rank 2, expected 0 (that is RANK: read LOCAL_RANK instead)"),
    "device_ids_on_cpu": (GOOD_03.replace('[local_rank] if device.type == "cuda" else None', "[local_rank]"),
                          "with a CPU model pass device_ids=None"),
    "no_ddp": (GOOD_03.replace("ddp = DDP(model, device_ids=[local_rank] if device.type == \"cuda\" else None)",
                               "ddp = model"),
               "the ranks' parameters differ after the step"),
    "bad_return": (GOOD_03.replace('return {"local_rank"', 'return {"rank"'),
                   "return a dict with keys 'local_rank', 'device' and 'checksum'"),
}

def _write(tmp_path, monkeypatch, name, source, function):
    """Write a learner's file (as %%writefile would) and return its function."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return getattr(importlib.import_module(name), function)


def test_lesson03_checker_accepts_a_right_solution(tmp_path, monkeypatch):
    report = check_device_worker(_write(tmp_path, monkeypatch, "good03", GOOD_03, "one_step"))
    assert report.passed and "every rank used its LOCAL_RANK's device" in report.lines[0], str(report)


@pytest.mark.parametrize("case", sorted(WRONG_03))
def test_lesson03_checker_explains_wrong_solutions(case, tmp_path, monkeypatch):
    source, message = WRONG_03[case]
    if case == "device_ids_on_cpu" and torch.cuda.is_available():
        pytest.skip("device_ids=[local_rank] is right on GPUs")
    report = check_device_worker(_write(tmp_path, monkeypatch, f"wrong03_{case}", source, "one_step"))
    assert not report.passed and message in str(report), str(report)
