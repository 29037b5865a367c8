"""Small workers for lesson 05's side topics: the ``module.`` prefix in a DDP state_dict,
torch's SyncBatchNorm on a CPU, and uneven inputs with ``Join``."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import param_checksum, process_group
    from ddp_lib.workers.train import MoonsNet, make_moons
except ModuleNotFoundError:  # copied into a project next to process_group.py and train.py
    from process_group import param_checksum, process_group
    from train import MoonsNet, make_moons


def state_dict_keys(rank: int, world_size: int) -> dict:
    """The keys of a DDP model's state_dict and of its ``.module``, what loading the DDP keys
    into a plain model says, and whether stripping the prefix fixes it."""
    with process_group(rank, world_size) as device:
        ddp_model = DDP(MoonsNet().to(device), device_ids=[device.index] if device.type == "cuda" else None)
        wrapped = ddp_model.state_dict()
        plain = MoonsNet()
        try:
            plain.load_state_dict(wrapped)
            error = ""
        except RuntimeError as exc:
            error = str(exc).splitlines()[0] + " " + str(exc).splitlines()[1].strip()[:60] + "..."
        consume_prefix_in_state_dict_if_present(wrapped, "module.")  # in place
        fixed = str(plain.load_state_dict(wrapped))
        return {"ddp_keys": list(ddp_model.state_dict()), "module_keys": list(ddp_model.module.state_dict()),
                "load_error": error, "after_strip": fixed}


def torch_sync_batchnorm(rank: int, world_size: int) -> str:
    """Wrap a model holding torch's ``nn.SyncBatchNorm`` in DDP on this rank's device."""
    with process_group(rank, world_size) as device:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(MoonsNet(norm="batch")).to(device)
        DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        return f"DDP accepted nn.SyncBatchNorm on {device.type}"


def uneven_batches(rank: int, world_size: int, use_join: int = 1, batch_size: int = 16, seed: int = 0) -> dict:
    """Rank r trains on 2 + 2*r batches (uneven on purpose), inside ``Join`` when use_join is 1.
    Returns {"rank", "steps", "checksum"}."""
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        x, y = make_moons().tensors
        steps = 2 + 2 * rank
        ddp_model = DDP(MoonsNet().to(device), device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        loss_fn = nn.CrossEntropyLoss()
        # Join: a rank that has run out of batches keeps answering the others' all-reduces
        # with zeros, so nobody waits for a peer that has left.
        with Join([ddp_model], enable=bool(use_join)):
            for step in range(steps):
                start = (step * world_size + rank) * batch_size
                xb, yb = x[start:start + batch_size].to(device), y[start:start + batch_size].to(device)
                optimizer.zero_grad()
                loss_fn(ddp_model(xb), yb).backward()
                optimizer.step()
        return {"rank": rank, "steps": steps, "checksum": round(param_checksum(ddp_model.module), 4)}
