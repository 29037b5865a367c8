"""Lesson 10's kept count of torch.compile's graphs with FSDP2, on 2 ranks: the whole model compiled,
against each block compiled on its own before ``fully_shard`` (torchtitan's recipe).

    python -m ddp_lib.demos.fsdp_compile > ddp_lib/demos/recorded/fsdp_compile.json   # a new kept run
"""

import json
import sys
from pathlib import Path

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from ddp_lib.process_group import process_group

KEPT_RUN = Path(__file__).with_name("recorded") / "fsdp_compile.json"
WAYS = ("torch.compile(model)", "each block compiled")


class Block(nn.Module):
    """One unit: Linear(width, width) then ReLU."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Blocks(nn.Module):
    """``blocks`` Blocks in an nn.ModuleList, run by a loop, as a transformer runs its layers."""

    def __init__(self, blocks: int = 3, width: int = 64) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def compiled_graphs(rank: int, world_size: int, blocks: int = 3, width: int = 64, steps: int = 2,
                    seed: int = 0) -> dict:
    """Shard ``Blocks`` with FSDP2 (each block a unit, then the root) and train ``steps`` steps, two
    ways: ``torch.compile`` of the whole sharded model, and each block compiled on its own and put
    back in place before ``fully_shard``. A backend counts the graphs dynamo hands it and runs them
    as traced. Returns {"rank", "graphs": {way: number of graphs}, "frames_given_up": {way: the Python
    frames dynamo began to compile and then ran eagerly}, "losses": {way: the losses}}."""
    with process_group(rank, world_size):
        graphs, given_up, losses = {}, {}, {}
        for way in WAYS:
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            count = [0]

            def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], count=count):
                count[0] += 1
                return gm.forward

            torch.manual_seed(seed)  # the same on every rank: fully_shard broadcasts no initial weights
            model = Blocks(blocks, width)
            if way == "each block compiled":
                for name, block in model.layers.named_children():
                    model.layers.register_module(name, torch.compile(block, backend=counting))
            for block in model.layers:
                fully_shard(block)
            fully_shard(model)
            step_model = torch.compile(model, backend=counting) if way == "torch.compile(model)" else model
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            x = torch.randn(8, width, generator=torch.Generator().manual_seed(seed + rank))
            losses[way] = []
            for _ in range(steps):
                optimizer.zero_grad()
                loss = step_model(x).square().mean()
                loss.backward()
                optimizer.step()
                losses[way].append(round(loss.item(), 6))
            graphs[way] = count[0]
            frames = torch._dynamo.utils.counters["frames"]
            given_up[way] = frames["total"] - frames["ok"]
        return {"rank": rank, "graphs": graphs, "frames_given_up": given_up, "losses": losses}


def kept_run() -> dict:
    """The run kept in the repository: {"ranks": what each rank returned, "blocks", "torch"}."""
    return json.loads(KEPT_RUN.read_text())


def main() -> int:
    from ddp_lib.launch import run_ranks

    ranks = run_ranks(compiled_graphs, 2, show_output=False)
    print(json.dumps({"ranks": ranks, "blocks": 3, "torch": torch.__version__}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
