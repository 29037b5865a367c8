"""Lesson 10's meta-device initialisation: build a model with no memory, shard it, then fill only
each rank's shards.

A model too large for one device cannot be built whole on each rank first. Built under
``torch.device("meta")``, its tensors have shapes and dtypes but no storage. ``fully_shard`` then
splits them, ``to_empty`` gives each rank memory for its own shards only, and ``reset_parameters``
(or a checkpoint's load) fills them."""

import warnings

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from ddp_lib.process_group import process_group


def make_model(width: int, layers: int) -> nn.Sequential:
    """``layers`` blocks of Linear(width, width) -> ReLU, then Linear(width, 1)."""
    blocks = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def meta_init(rank: int, world_size: int, width: int = 256, layers: int = 4, seed: int = 0) -> dict:
    """Build the model on "meta", shard it per Linear and at the root, move it to empty CPU memory and
    initialise it. Returns {"rank", "before" and "after" (the parameters' devices before and after
    to_empty), "local_bytes" (bytes of the shards this rank holds), "full_bytes" (bytes of the whole
    model), "in_bounds" (every value finite and within nn.Linear's initial bound, 1/sqrt(fan_in)),
    "halves_equal" (the first weight's rank-0 rows equal its rank-1 rows: on CPU each rank draws its
    shard from its own generator), "halves_equal_seed_per_rank" (the same after initialising again with
    seed + rank), "rng_warnings" (the distinct warnings about DTensor's random operators that the first
    initialisation raised)}."""
    with process_group(rank, world_size):
        with torch.device("meta"):
            model = make_model(width, layers)
        before = sorted({str(p.device) for p in model.parameters()})  # shapes only, no storage
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        model.to_empty(device="cpu")  # memory for this rank's shards, not yet initialised
        torch.manual_seed(seed)  # the same seed on every rank; each rank fills its own rows
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for layer in model:
                if isinstance(layer, nn.Linear):
                    layer.reset_parameters()
        rng_warnings = sorted({str(w.message) for w in caught if "DTensor random" in str(w.message)})
        linears = [layer for layer in model if isinstance(layer, nn.Linear)]
        in_bounds = all(bool(p.to_local().abs().le(layer.in_features ** -0.5).all())  # False for nan or inf
                        for layer in linears for p in (layer.weight, layer.bias))
        halves_equal = torch.equal(*linears[0].weight.full_tensor().chunk(2))
        torch.manual_seed(seed + rank)  # on CPU: a seed of its own for each rank's shards
        for layer in linears:
            layer.reset_parameters()
        return {"rank": rank, "before": before, "after": sorted({str(p.device) for p in model.parameters()}),
                "local_bytes": sum(p.to_local().numel() * p.element_size() for p in model.parameters()),
                "full_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                "in_bounds": in_bounds, "halves_equal": halves_equal, "rng_warnings": rng_warnings,
                "halves_equal_seed_per_rank": torch.equal(*linears[0].weight.full_tensor().chunk(2))}
