"""Lesson 10: saving ZeRO-1's optimizer state. Each rank holds Adam's state for its own parameters
only; ``consolidate_state_dict(to=0)``, called on every rank, gathers the whole state on rank 0.

    run_ranks(consolidated_state, 2)
"""

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import device_ids_for, process_group
from ddp_lib.workers.beyond_ddp import make_deep_mlp


def consolidated_state(rank: int, world_size: int, seed: int = 0) -> dict:
    """One Adam step under ZeRO-1, then the state dict before and after ``consolidate_state_dict(to=0)``.

    Returns the parameters with Adam state on this rank, the error ``get_state_dict`` raises before
    consolidation, the parameters in ``state_dict()`` after it (rank 0), and the error ``state_dict()``
    raises on the other ranks.
    """
    with process_group(rank, world_size) as device:
        model = make_deep_mlp(seed=seed).to(device)
        ddp_model = DDP(model, device_ids=device_ids_for(device))
        optimizer = ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
        g = torch.Generator().manual_seed(seed + rank)
        x, y = torch.randn(8, 256, generator=g).to(device), torch.randn(8, 1, generator=g).to(device)
        torch.nn.functional.mse_loss(ddp_model(x), y).backward()
        optimizer.step()
        own = len(optimizer.optim.state)  # the parameters this rank keeps Adam's state for
        try:  # the call that saves DDP's and FSDP2's optimizers: it asks ZeRO-1's for state_dict() at once
            get_state_dict(ddp_model, optimizer)
            get_state_dict_error = None
        except RuntimeError as e:
            get_state_dict_error = str(e).split(".")[0]
        optimizer.consolidate_state_dict(to=0)  # a collective: every rank must call it
        try:
            saved, error = len(optimizer.state_dict()["state"]), None
        except RuntimeError as e:
            saved, error = None, str(e).split(".")[0]
        return {"rank": rank, "parameters": len(list(model.parameters())), "own_state": own,
                "get_state_dict_error": get_state_dict_error, "saved_state": saved, "error": error}
