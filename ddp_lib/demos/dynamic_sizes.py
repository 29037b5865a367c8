"""Lesson 09's second compile: a new batch size compiles once more, and that graph takes the size
as an input, so later sizes reuse it.

torch.compile hands each graph it makes to its backend with example inputs. A graph built for one
fixed size takes tensors only. A graph whose batch size is dynamic also takes that size, as a
``torch.SymInt``."""

import torch
from torch import nn


def compiles_per_batch_size(rank: int, world_size: int, sizes: tuple[int, ...] = (16, 16, 12, 8),
                            width: int = 4) -> dict:
    """Run a compiled ``nn.Linear`` forward and backward on batches of ``sizes`` rows, one after the
    other, with a backend that notes each graph it is handed. Needs no process group.

    Returns {"sizes", "compiles" (one dict per graph: "at_size", the batch size that compiled it,
    and "size_is_input", whether the graph takes the batch size as an input)}."""
    compiles = []
    size_now = [0]

    def noting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        compiles.append({"at_size": size_now[0],
                         "size_is_input": any(isinstance(x, torch.SymInt) for x in example_inputs)})
        return gm.forward  # run the traced graph as it is

    torch.manual_seed(0)
    model = torch.compile(nn.Linear(width, 1), backend=noting_backend)
    for size in sizes:
        size_now[0] = size
        model(torch.ones(size, width)).sum().backward()
    return {"sizes": list(sizes), "compiles": compiles}
