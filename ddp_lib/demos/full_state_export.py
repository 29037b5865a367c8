"""Lesson 10: export an FSDP2 model as one ordinary state dict, on rank 0, for a single-process user.

``get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))``
all-gathers every sharded parameter; with ``cpu_offload`` only rank 0 keeps the result, in CPU
memory, and every other rank gets an empty dict. Without ``cpu_offload`` every rank gets all of it.
Rank 0 then writes it with ``torch.save``: one ordinary file, which ``torch.load`` reads in a single
process. ``get_state_dict`` takes a DDP model too, and names its entries as the plain model does.
"""

import os
import tempfile

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.nn import Linear
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group
from ddp_lib.workers.beyond_ddp import make_deep_mlp


def full_state_export(rank: int, world_size: int, path: str = "", width: int = 256, layers: int = 4,
                      seed: int = 0) -> dict:
    """Shard ``make_deep_mlp`` with FSDP2 (each Linear a unit), export its full state dict, save it
    on rank 0 to ``path`` (default: a file in a temporary directory) and load that file into a
    plain copy. Returns {"rank", "entries" (how many this rank got), "plain_tensors" (none
    of them a DTensor), "loads_into_plain_model" (rank 0: the saved file loads into an unsharded model
    with equal weights; other ranks: None), "entries_without_offload" (the same export without
    ``cpu_offload``), "ddp_names_plain" (``get_state_dict`` of a DDP model and its Adam names the
    entries as the plain model's ``state_dict``, without ``module.``)}."""
    with process_group(rank, world_size), tempfile.TemporaryDirectory() as scratch:
        path = path or os.path.join(scratch, "model.pt")
        model = make_deep_mlp(width=width, layers=layers, seed=seed)
        for layer in model:
            if isinstance(layer, Linear):
                fully_shard(layer)
        fully_shard(model)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(full, path)  # one ordinary file, for torch.load in a single process
        everywhere = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        loads = None
        if rank == 0:
            plain = make_deep_mlp(width=width, layers=layers, seed=seed + 1)  # other weights, then the file's
            plain.load_state_dict(torch.load(path))
            reference = make_deep_mlp(width=width, layers=layers, seed=seed)
            loads = all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), reference.state_dict().values()))
        plain = make_deep_mlp(width=width, layers=layers, seed=seed)
        ddp_model = DDP(plain)
        model_state, optim_state = get_state_dict(ddp_model, torch.optim.Adam(ddp_model.parameters()))
        names = list(plain.state_dict())
        optim_names = [name for group in optim_state["param_groups"] for name in group["params"]]
        ddp_names_plain = list(model_state) == names and optim_names == names
        return {"rank": rank, "entries": len(full),
                "plain_tensors": not any(isinstance(t, DTensor) for t in full.values()),
                "loads_into_plain_model": loads, "entries_without_offload": len(everywhere),
                "ddp_names_plain": ddp_names_plain}
