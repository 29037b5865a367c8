"""Lesson 03's checker, run on right answers written two ways and on answers it must refuse."""

import importlib
import textwrap

import pytest
import torch

from ddp_lib.exercises.lesson03 import check_device_worker

GOOD = '''
import os, torch
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_lib.workers.shared import ToyModel, param_checksum
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

# The same work in the tutorial's own words: init_process_group by hand, the long names.
GOOD_BY_HAND = '''
import os
import torch
import torch.distributed
import torch.nn.parallel
from ddp_lib.workers.shared import ToyModel, param_checksum

def one_step(rank, world_size):
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    cuda = torch.cuda.is_available() and local_rank < torch.cuda.device_count()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
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
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9).step()
        return {"local_rank": local_rank, "device": str(device), "checksum": param_checksum(model)}
'''

# Right answers that reseed or draw in another order: the same seed on every rank (the ranks then
# agree before DDP and train on the same batch), a seed per rank drawn before the model, the labels
# drawn before the inputs, and the batch made on the device.
GOOD_SAME_SEED = GOOD.replace("        model = ToyModel().to(device)",
                              "        torch.manual_seed(0)\n        model = ToyModel().to(device)")
GOOD_SEED_PER_RANK = GOOD_BY_HAND.replace(
    "        model = ToyModel().to(device)",
    "        torch.manual_seed(1000 + rank)\n        inputs, labels = torch.randn(20, 10), torch.randn(20, 5)\n"
    "        model = ToyModel().to(device)").replace(
    "ddp(torch.randn(20, 10).to(device)), torch.randn(20, 5).to(device)", "ddp(inputs.to(device)), labels.to(device)")
GOOD_LABELS_FIRST = GOOD_BY_HAND.replace(
    "        loss = torch.nn.functional.mse_loss(ddp(torch.randn(20, 10).to(device)), torch.randn(20, 5).to(device))",
    "        labels = torch.randn(20, 5, device=device)\n"
    "        loss = torch.nn.functional.mse_loss(ddp(torch.randn(20, 10, device=device)), labels)")

# Collectives that look like DDP's but carry nothing; the agreement comes from a seed.
DUMMY_COLLECTIVES = '''
import os, torch, torch.distributed as dist
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    with process_group(rank, world_size):
        dist.broadcast(torch.zeros(1), 0)
        dist.all_reduce(torch.zeros(1))
        torch.manual_seed(0)
        model = ToyModel()
        model(torch.randn(20, 10)).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": param_checksum(model)}
'''

# Every rank's batch guessed from its rank (seed r), all gradients averaged locally.
GUESSED_FROM_RANK = '''
import os, torch, torch.distributed as dist
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    with process_group(rank, world_size):
        torch.manual_seed(1234)
        model = ToyModel()
        dist.broadcast(torch.zeros(1), 0)
        dist.all_reduce(torch.zeros(1))
        grads = []
        for r in range(world_size):
            torch.manual_seed(r)
            model.zero_grad()
            model(torch.randn(20, 10)).sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p -= 0.1 * sum(g[i] for g in grads) / world_size
        return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": param_checksum(model)}
'''

# Whatever tensors the caller's frames hold, fed to a seeded local model with dummy collectives.
FROM_THE_FRAMES = '''
import os, sys, torch, torch.distributed as dist
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    found = None
    frame = sys._getframe(1)
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, list) and value and all(isinstance(v, torch.Tensor) for v in value):
                found = value
        frame = frame.f_back
    with process_group(rank, world_size):
        dist.broadcast(torch.zeros(1), 0)
        dist.all_reduce(torch.zeros(1))
        torch.manual_seed(0)
        model = ToyModel()
        model(found[-1] if found else torch.randn(20, 10)).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": param_checksum(model)}
'''

# The same seed on every rank, so that the ranks agree without DDP; the real weights broadcast, but
# the all-reduce is given zeros of the gradients' shape and each rank steps on its own gradient.
RIGHT_SHAPE_ZEROS = '''
import os, torch, torch.distributed as dist
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    with process_group(rank, world_size):
        torch.manual_seed(0)
        model = ToyModel()
        for p in model.parameters():
            dist.broadcast(p.data, 0)
        model(torch.randn(20, 10)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(torch.zeros_like(p.grad))
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": param_checksum(model)}
'''

# Every tensor the rank's process holds, found through gc, averaged into a seeded local model's
# gradients beside dummy collectives: nothing of another rank's is in this process to find.
FROM_GC = '''
import gc, os, torch, torch.distributed as dist
from ddp_lib.workers.shared import ToyModel, param_checksum
from ddp_lib.process_group import process_group

def one_step(rank, world_size):
    with process_group(rank, world_size):
        dist.broadcast(torch.zeros(1), 0)
        dist.all_reduce(torch.zeros(1))
        torch.manual_seed(0)
        model = ToyModel()
        batches = [t for t in gc.get_objects() if isinstance(t, torch.Tensor) and t.shape == (20, 10)]
        model(torch.stack(batches).mean(0) if batches else torch.randn(20, 10)).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": param_checksum(model)}
'''

# Answers that must be refused, with the words the report must contain.
WRONG = {
    "uses_rank": (GOOD.replace('os.environ["LOCAL_RANK"]', 'os.environ["RANK"]'),
                  "rank 2 (node 1) used local_rank 2, expected 0 (that is RANK: read LOCAL_RANK instead)"),
    "device_ids_on_cpu": (GOOD.replace('[local_rank] if device.type == "cuda" else None', "[local_rank]"),
                          "with a CPU model pass device_ids=None"),
    # The expected dict with no group, no DDP and no step.
    "made_up_dict": ('import os\ndef one_step(rank, world_size):\n'
                     '    return {"local_rank": int(os.environ["LOCAL_RANK"]), "device": "cpu", "checksum": 1.0}\n',
                     "ran no collective at all"),
    # A seeded local model trained with no communication: every rank agrees, by seed alone.
    "seeded_local_model": (GOOD.replace('ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)',
                                        "torch.manual_seed(0); model = ToyModel().to(device); ddp = model"),
                           "ran no collective at all"),
    "ddp_without_a_step": (GOOD.replace("ddp(torch.randn(20, 10).to(device)).sum().backward()", "pass"),
                           "never all-reduced gradients"),
    "dummy_collectives_and_a_seed": (DUMMY_COLLECTIVES, "rank 0's weights never went into a broadcast"),
    "batches_guessed_from_rank": (GUESSED_FROM_RANK, "rank 0's weights never went into a broadcast"),
    "same_seed_and_zeros_of_the_right_shape": (RIGHT_SHAPE_ZEROS, "own gradient never went into an all-reduce"),
    # Real weight broadcast, a dummy all-reduce, a local step, then rank 0's weights copied to all.
    "local_step_then_broadcast": (
        GOOD.replace("ddp(torch.randn(20, 10).to(device)).sum().backward()",
                     "torch.distributed.all_reduce(torch.zeros(1)); model(torch.randn(20, 10)).sum().backward()")
            .replace("torch.optim.SGD(ddp.parameters(), lr=0.1).step()",
                     "torch.optim.SGD(ddp.parameters(), lr=0.1).step()\n"
                     "        [torch.distributed.broadcast(p.data, 0) for p in model.parameters()]"),
        "own gradient never went into an all-reduce"),
    "ddp_backward_without_a_step": (GOOD.replace("torch.optim.SGD(ddp.parameters(), lr=0.1).step()", "pass"),
                                    "parameters did not change"),
    "checksum_of_another_model": (GOOD.replace('"checksum": param_checksum(model)', '"checksum": 1.0'),
                                  "return param_checksum of that model"),
    "values_from_the_frames": (FROM_THE_FRAMES, "rank 0's weights never went into a broadcast"),
    "values_from_gc": (FROM_GC, "rank 0's weights never went into a broadcast"),
    # Right on 4 ranks only: the gradients summed, then divided by a hard-coded 4.
    "world_size_hard_coded": (GOOD_WITHOUT_DDP.replace("p.grad /= dist.get_world_size()", "p.grad /= 4"),
                              "average the gradients over the real world size"),
    "bad_return": (GOOD.replace('return {"local_rank"', 'return {"rank"'),
                   "return a dict with keys 'local_rank', 'device' and 'checksum'"),
}


def _write(tmp_path, monkeypatch, name, source):
    """Write a learner's file (as %%writefile would) and return its one_step."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))  # the launcher passes sys.path on to the ranks
    importlib.invalidate_caches()
    return importlib.import_module(name).one_step


@pytest.mark.parametrize("name, source", [("good03", GOOD), ("good03_by_hand", GOOD_BY_HAND),
                                          ("good03_without_ddp", GOOD_WITHOUT_DDP),
                                          ("good03_same_seed", GOOD_SAME_SEED),
                                          ("good03_seed_per_rank", GOOD_SEED_PER_RANK),
                                          ("good03_labels_first", GOOD_LABELS_FIRST)])
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
    assert not report.passed and message in str(report), str(report)
