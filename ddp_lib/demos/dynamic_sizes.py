"""Lesson 09's second compile: a new batch size compiles once more, and that graph takes the size
as an input, so later sizes reuse it.

torch.compile hands each graph it makes to its backend with example inputs. A graph built for one
fixed size takes tensors only. A graph whose batch size is dynamic also takes that size, as a
``torch.SymInt``."""

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.workers.training_loop import LoopNet


def compiles_per_batch_size(rank: int, world_size: int, sizes: tuple[int, ...] = (16, 16, 12, 8),
                            width: int = 4, ddp: bool = False) -> dict:
    """Run a compiled ``nn.Linear`` forward and backward on batches of ``sizes`` rows, one after the
    other, with a backend that notes each graph it is handed. Needs no process group, unless ``ddp``:
    then the model is lesson 09's ``LoopNet`` (2 inputs; ``width`` is ignored), wrapped in DDP in the
    caller's group after it is compiled, ``DDP(torch.compile(LoopNet()))``. (Wrapped first,
    ``torch.compile(DDP(nn.Linear(...)))`` would compile nothing: dynamo skips torch.nn's own frames,
    as compiled.py explains.)

    Returns {"sizes", "compiles" (one dict per graph: "at_size", the batch size that compiled it,
    and "size_is_input", whether the graph takes the batch size as an input)}."""
    compiles = []
    size_now = [0]

    def noting_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        compiles.append({"at_size": size_now[0],
                         "size_is_input": any(isinstance(x, torch.SymInt) for x in example_inputs)})
        return gm.forward  # run the traced graph as it is

    if ddp:  # lesson 09's job compiled LoopNet before: forget those graphs and the sizes they saw
        torch._dynamo.reset()
    torch.manual_seed(0)
    model = DDP(torch.compile(LoopNet(), backend=noting_backend)) if ddp else torch.compile(
        nn.Linear(width, 1), backend=noting_backend)
    for size in sizes:
        size_now[0] = size
        model(torch.ones(size, 2 if ddp else width)).sum().backward()
    return {"sizes": list(sizes), "compiles": compiles}
