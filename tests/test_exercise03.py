"""Lesson 03's checker, run on right answers written two ways and on answers it must refuse."""

import importlib
import textwrap

import pytest
import torch
import torch.distributed as dist

from ddp_lib.exercises.lesson03 import check_device_worker, check_load_on_device

GOOD = '''
import os, torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_lib.workers.shared import ToyModel, param_checksum

def one_step(rank, world_size):
    local_rank = int(os.environ["LOCAL_RANK"])
    use_gpu = torch.cuda.is_available()
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_gpu else "gloo", rank=rank, world_size=world_size,
                            device_id=device if use_gpu else None)
    try:
        model = ToyModel().to(device)
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        ddp(torch.randn(20, 10).to(device)).sum().backward()
        torch.optim.SGD(ddp.parameters(), lr=0.01).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
    finally:
        dist.destroy_process_group()
'''
SET_DEVICE_FIRST = """    if use_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_gpu else "gloo", rank=rank, world_size=world_size,
                            device_id=device if use_gpu else None)
"""
SET_DEVICE_LATE = """    dist.init_process_group("nccl" if use_gpu else "gloo", rank=rank, world_size=world_size,
                            device_id=device if use_gpu else None)
    if use_gpu:
        torch.cuda.set_device(device)
"""

# The same work in the tutorial's own words: names imported from torch, a device from a string, another loss.
GOOD_BY_HAND = '''
import os
import torch
import torch.nn.parallel
from torch.cuda import set_device
from torch.distributed import destroy_process_group, init_process_group
from ddp_lib.workers.shared import ToyModel, param_checksum

def one_step(rank, world_size):
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}" if cuda else "cpu")
    if cuda:
        set_device(device)
        init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    else:
        init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = ToyModel().to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        loss = torch.nn.functional.mse_loss(ddp(torch.randn(20, 10).to(device)), torch.randn(20, 5).to(device))
        loss.backward()
        optimizer.step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
    finally:
        destroy_process_group()
'''

# No DDP wrapper: the same two collectives written by hand, through other routes (a ProcessGroup
# method, a name imported from torch.distributed, distributed_c10d's ReduceOp), and SGD with momentum.
GOOD_WITHOUT_DDP = '''
import os, torch
import torch.distributed as dist
from torch.distributed import all_reduce
from torch.distributed.distributed_c10d import ReduceOp
from ddp_lib.workers.shared import ToyModel, param_checksum

def one_step(rank, world_size):
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.accelerator.set_device_index(device)
        dist.init_process_group("nccl", rank=rank, world_size=world_size, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = ToyModel().to(device)
        for p in model.parameters():
            dist.group.WORLD.broadcast(p.data, 0).wait()
        model(torch.randn(20, 10).to(device)).sum().backward()
        for p in model.parameters():
            all_reduce(p.grad, op=ReduceOp.SUM)
            p.grad /= dist.get_world_size()
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
    finally:
        dist.destroy_process_group()
'''

# Answers that must be refused, with the words the report must contain.
WRONG = {
    # RANK % GPUs would equal LOCAL_RANK on a node with as many GPUs as ranks: the faked node has 4 GPUs, 2 ranks.
    "uses_rank": (GOOD.replace('os.environ["LOCAL_RANK"]', 'os.environ["RANK"]'),
                  "called set_device(3) (that is the global rank"),
    # The tutorial's mp.spawn habit, its rank taken as the local rank: the same mistake under torchrun.
    # The report names mp.spawn's rank argument, not only the RANK variable, so this learner sees their own line.
    "spawn_rank_as_local_rank": (GOOD.replace('int(os.environ["LOCAL_RANK"])', "rank"),
                                 "called set_device(3) (that is the global rank, from RANK or from mp.spawn's "
                                 "rank argument: read LOCAL_RANK instead)"),
    # The GPU branch right, the CPU branch's reported local rank taken from RANK: the simulated nodes catch it.
    "reports_rank": (GOOD.replace('return {"local_rank": local_rank', 'return {"local_rank": rank'),
                     "rank 2 (node 1) used local_rank 2, expected 0 (that is the global rank"),
    "set_device_after_init": (GOOD.replace(SET_DEVICE_FIRST, SET_DEVICE_LATE),
                              "did not call torch.cuda.set_device before init_process_group (it came after"),
    "no_set_device": (GOOD.replace("        torch.cuda.set_device(device)\n", "        pass\n"),
                      "did not call torch.cuda.set_device before init_process_group: call it first"),
    "set_device_of_rank": (GOOD.replace("torch.cuda.set_device(device)", "torch.cuda.set_device(rank)"),
                           "called set_device(3) (that is the global rank"),
    "no_device_id": (GOOD.replace("device_id=device if use_gpu else None", "device_id=None"),
                     "passed device_id=None to init_process_group: pass device_id=device"),
    "gloo_on_gpus": (GOOD.replace('"nccl" if use_gpu else "gloo"', '"gloo"'),
                     "joined with backend 'gloo': use \"nccl\" for CUDA GPUs"),
    "model_before_the_group": (GOOD.replace("    if use_gpu:\n        torch.cuda.set_device(device)\n",
                                            "    ToyModel().to(device)\n"
                                            "    if use_gpu:\n        torch.cuda.set_device(device)\n"),
                               "build the model after init_process_group"),
    "device_ids_on_cpu": (GOOD.replace('[device.index] if device.type == "cuda" else None', "[local_rank]"),
                          "with a CPU model pass device_ids=None"),
    "made_up_dict": ('import os\ndef one_step(rank, world_size):\n'
                     '    return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": 1.0}\n',
                     "never called dist.init_process_group"),
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
    # The opening diff's init_process_group line in both branches: gloo with device_id=cpu, which torch refuses.
    "device_id_on_cpu": (GOOD.replace("device_id=device if use_gpu else None", "device_id=device"),
                         "device_id= is for a GPU: pass it only where CUDA is available"),
    # A GPU device picked without asking whether CUDA is there: the hint is about this exercise, not process_group.
    "cuda_without_checking": (GOOD.replace("use_gpu = torch.cuda.is_available()", "use_gpu = True").replace(
                                  "local_rank % torch.cuda.device_count()", "local_rank"),
                              "the checker's ranks see no GPU: where torch.cuda.is_available() is False"),
    "bad_return": (GOOD.replace('return {"local_rank"', 'return {"rank"'),
                   "return a dict with keys 'local_rank', 'device' and 'checksum'"),
    # The classic example's forward with the CPU model's device_ids: right on a CPU, wrong on a GPU.
    "device_ids_none_and_input_unmoved": (
        GOOD.replace('device_ids=[device.index] if device.type == "cuda" else None', "device_ids=None")
            .replace("ddp(torch.randn(20, 10).to(device))", "ddp(torch.randn(20, 10))"),
        "in DDP with device_ids=None and passed an input on cpu; DDP then moves nothing, and on a GPU the first "
        "layer fails. Pass device_ids=[device.index] to DDP, or move the input with .to(device)"),
    # The same with device_ids left to the tutorial's spelling for a CPU model, an empty list.
    "device_ids_empty_and_input_unmoved": (
        GOOD.replace('device_ids=[device.index] if device.type == "cuda" else None', "device_ids=[]")
            .replace("ddp(torch.randn(20, 10).to(device))", "ddp(torch.randn(20, 10))"),
        "in DDP with device_ids=[] and passed an input on cpu"),
    # The tutorial's device_ids=[rank] on a node where the rank is not the GPU: DDP moves the input to cuda:3.
    "device_ids_of_rank": (
        GOOD.replace('device_ids=[device.index] if device.type == "cuda" else None',
                     'device_ids=[rank] if device.type == "cuda" else None')
            .replace("ddp(torch.randn(20, 10).to(device))", "ddp(torch.randn(20, 10))"),
        "passed device_ids=[3] to DDP, which moved the input to cuda:3, but the model is on cuda:1 (that is the "
        "global rank"),
    # The same device_ids=[rank] with the input moved to the model's GPU: DDP moves it again, to cuda:3.
    "device_ids_of_rank_input_moved": (
        GOOD.replace('device_ids=[device.index] if device.type == "cuda" else None',
                     'device_ids=[rank] if device.type == "cuda" else None'),
        "passed device_ids=[3] to DDP, which moved the input to cuda:3, but the model is on cuda:1 (that is the "
        "global rank"),
    # The model left on the CPU: set_device and the group are right, the forward is not on the GPU.
    "model_not_moved": (GOOD.replace("model = ToyModel().to(device)", "model = ToyModel()"),
                        "rank 3's model was on cpu at its forward: move it to the rank's device"),
}

# Right answers with the move written differently: DDP moves the input (the classic example's forward), or the
# worker moves it and DDP gets device_ids=None (legal for a model on one GPU).
GOOD_DDP_MOVES = GOOD.replace("ddp(torch.randn(20, 10).to(device))", "ddp(torch.randn(20, 10))")
GOOD_WORKER_MOVES = GOOD.replace('device_ids=[device.index] if device.type == "cuda" else None', "device_ids=None")


def _write(tmp_path, monkeypatch, name, source):
    """Write a learner's file (as %%writefile would) and return its one_step."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return importlib.import_module(name).one_step


@pytest.mark.parametrize("name, source", [("good03", GOOD), ("good03_by_hand", GOOD_BY_HAND),
                                          ("good03_without_ddp", GOOD_WITHOUT_DDP),
                                          ("good03_ddp_moves", GOOD_DDP_MOVES),
                                          ("good03_worker_moves", GOOD_WORKER_MOVES)])
def test_right_answers_pass_on_both_layouts(name, source, tmp_path, monkeypatch):
    report = check_device_worker(_write(tmp_path, monkeypatch, name, source))
    assert report.passed and len(report.lines) == 3, str(report)
    assert report.lines[0].startswith("PASS on a node with 4 GPUs and 2 ranks (faked)")
    assert 'then init_process_group("nccl", device_id=cuda:1)' in report.lines[0]
    # The faked forward is reached where DDP wraps the model; the hand-written collectives fail before it.
    reached = "; the forward's input reached the model on cuda:1" in report.lines[0]
    assert reached == (name != "good03_without_ddp"), report.lines[0]


def test_the_solution_passes_with_its_input_on_the_gpu():
    from ddp_lib.exercises.solutions.lesson03 import one_step

    report = check_device_worker(one_step)
    assert report.passed and len(report.lines) == 3, str(report)
    assert report.lines[0].endswith("; the forward's input reached the model on cuda:1"), report.lines[0]
    assert report.lines[1].startswith("PASS 2 nodes x 2 ranks") and report.lines[2].startswith("PASS 1 node x 3 ranks")



@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_answers_are_refused_with_the_reason(case, tmp_path, monkeypatch):
    source, message = WRONG[case]
    report = check_device_worker(_write(tmp_path, monkeypatch, f"wrong03_{case}", source))
    fails = [line for line in report.lines if line.startswith("FAIL")]
    assert len(fails) == 1 and message in fails[0], str(report)
    assert "with process_group(" not in fails[0] and ".to(rank)" not in fails[0], str(report)  # lesson 01's hint


def test_the_real_runs_see_no_gpu_where_cuda_is_available(tmp_path, monkeypatch):
    """Both layouts run every rank on this machine: with GPUs, two ranks would share one. The ranks see none."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the checker's own process has CUDA
    line = "    use_gpu = torch.cuda.is_available()\n"
    source = GOOD.replace(line, line + '    assert use_gpu or os.environ["CUDA_VISIBLE_DEVICES"] == ""\n')
    assert source != GOOD
    report = check_device_worker(_write(tmp_path, monkeypatch, "good03_sees_no_gpu", source))
    assert report.passed and len(report.lines) == 3, str(report)
    assert "(cpu, cpu, cpu, cpu)" in report.lines[1] and "(cpu, cpu, cpu)" in report.lines[2], str(report)


# Exercise 3: load_on_device(path, device), two right answers and the mistakes a learner makes.
LOAD_GOOD = {
    "map_location_device": "def load_on_device(path, device):\n    return torch.load(path, map_location=device)\n",
    "map_location_string": ("def load_on_device(path, device):\n"
                            "    state = torch.load(path, map_location=str(device), weights_only=True)\n"
                            "    return dict(state)\n"),
}
LOAD_WRONG = {
    "no_map_location": ("def load_on_device(path, device):\n    return torch.load(path)\n",
                        "is_available() is False; pass map_location=device to torch.load"),
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


def test_load_on_device_solution_passes():
    from ddp_lib.exercises.solutions.lesson03 import load_on_device

    report = check_load_on_device(load_on_device)
    assert report.passed and len(report.lines) == 2, str(report)


@pytest.mark.parametrize("prefix", [..., "", "net1.", "m", "module"])
def test_a_wrong_state_dict_prefix_fails(prefix):
    from ddp_lib.exercises.lesson03 import check_state_dict_prefix

    report = check_state_dict_prefix(prefix)
    assert not report.passed, str(report)
    # A wrong prefix is answered with one real key, so the learner sees the keys' shape.
    assert ("'module.net1.weight'" in str(report)) == (isinstance(prefix, str) and prefix != ""), str(report)
    assert not dist.is_initialized()  # the one-process group made for the check is gone


def test_the_ddp_wrappers_prefix_passes_and_names_every_key():
    from ddp_lib.exercises.lesson03 import check_state_dict_prefix, ddp_state_dict_keys

    assert ddp_state_dict_keys() == ["module.net1.weight", "module.net1.bias", "module.net2.weight", "module.net2.bias"]
    report = check_state_dict_prefix("module.")
    assert report.passed and "module.net2.bias" in str(report), str(report)
    assert not dist.is_initialized()


def test_the_pass_line_shows_the_backend_as_written(tmp_path, monkeypatch):
    """No backend name is valid: init_process_group picks nccl for cuda; the PASS line shows none either."""
    source = GOOD.replace(SET_DEVICE_FIRST, SET_DEVICE_FIRST.replace('"nccl" if use_gpu else "gloo", ', ""))
    assert source != GOOD
    report = check_device_worker(_write(tmp_path, monkeypatch, "good03_no_backend", source))
    assert report.passed, str(report)
    assert "then init_process_group(device_id=cuda:1);" in report.lines[0], report.lines[0]
