"""Lesson 09: what ``torch.compile`` does to a DDP model. Dynamo's DDPOptimizer splits the captured
graph into pieces of at most DDP's ``bucket_bytes_cap`` of parameters (the first piece at most
1 MiB), imitating DDP's buckets without reading them, and hands each piece to the backend on its own.

    run_ranks(compiled_graphs, 2, kwargs=dict(bucket_cap_mb=1.0, optimize_ddp=True))
    run_ranks(compiled_graphs_for, 2, kwargs=dict(settings=[dict(optimize_ddp=True), dict(optimize_ddp=False)]))

Copyable: needs only torch and ``process_group`` (from ddp_lib, or a process_group.py beside it).
"""

import copy
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, process_group
except ModuleNotFoundError:  # copied into a project next to process_group.py
    from process_group import device_ids_for, process_group

# DDPOptimizer's first bucket (torch/_dynamo/backends/distributed.py): torch builds it without a
# first_bucket_cap, so it takes torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB, and refuses
# (AssertionError) any bucket_bytes_cap below that.
FIRST_BUCKET_MB = 1.0


def compiled_graphs(rank: int, world_size: int, bucket_cap_mb: float | None = 1.0, optimize_ddp: bool = True,
                    model: Literal["deep_net", "sequential"] = "deep_net", steps: int = 2, seed: int = 0,
                    wrap_first: bool = False) -> dict:
    """Compile a DDP model with a backend that records every graph dynamo hands it and runs it as
    it is (no C++ compiler needed), train it ``steps`` steps next to an uncompiled twin, and
    report the graphs against the buckets DDP all-reduced.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        bucket_cap_mb: DDP's bucket size in MiB (with optimize_ddp, at least 1); None: DDP's default,
            25 MiB with a first bucket of 1 MiB.
        optimize_ddp: torch._dynamo.config.optimize_ddp: split the graph by DDP's bucket size.
        model: "deep_net" (DeepNet) or "sequential" (the same layers in an nn.Sequential).
        steps: SGD steps, on random data of 16 samples per rank (from the second step on, DDP
            all-reduces the buckets it rebuilt in the order the gradients became ready).
        seed: seed of the weights (the same on every rank) and of the data (+ rank).
        wrap_first: False compiles the module, then wraps it, ``DDP(torch.compile(module))``, the
            order lesson 09 recommends; True wraps first, ``torch.compile(DDP(module))``.

    Returns {"rank", "graphs" (per graph the backend got, in the order it got them: "parameters"
    and "bytes" of the parameters it uses), "buckets" (bytes of each all-reduce in the last step,
    in the order DDP started them), "allreduces_per_step", "max_diff" (largest parameter
    difference from the uncompiled twin after the steps)}.
    """
    if optimize_ddp and bucket_cap_mb is not None and bucket_cap_mb < FIRST_BUCKET_MB:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb}: with optimize_ddp=True torch needs at least "
                         f"{FIRST_BUCKET_MB:g} (DDPOptimizer's first bucket); use a larger cap or optimize_ddp=False")
    if model not in ("deep_net", "sequential"):
        raise ValueError(f"model={model!r}: expected 'deep_net' or 'sequential'")
    if steps < 1:
        raise ValueError(f"steps={steps}: expected at least 1")
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        net = DeepNet()
        module = (net.as_sequential() if model == "sequential" else net).to(device)
        twin = copy.deepcopy(module)
        graphs: list[dict] = []

        def recording_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
            params = [t for t in example_inputs if isinstance(t, nn.Parameter)]
            graphs.append({"parameters": len(params), "bytes": sum(p.numel() * p.element_size() for p in params)})
            return gm.forward  # run the graph as traced: eager, so no C++ compiler is needed

        inner = module if wrap_first else torch.compile(module, backend=recording_backend)
        ddp_model = DDP(inner, device_ids=device_ids_for(device), bucket_cap_mb=bucket_cap_mb)
        eager_model = DDP(twin, device_ids=device_ids_for(device), bucket_cap_mb=bucket_cap_mb)
        sent: list[int] = []  # bytes of each all-reduce ddp_model starts

        def recording_allreduce(_state: None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            sent.append(bucket.buffer().numel() * bucket.buffer().element_size())
            return default_hooks.allreduce_hook(None, bucket)

        ddp_model.register_comm_hook(None, recording_allreduce)
        compiled = torch.compile(ddp_model, backend=recording_backend) if wrap_first else ddp_model
        optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (module, twin)]
        g = torch.Generator().manual_seed(seed + rank)
        allreduces_per_step = []
        with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):  # read when the first call compiles
            for _ in range(steps):
                x = torch.randn(16, 2, generator=g).to(device)
                y = torch.randint(0, 2, (16,), generator=g).to(device)
                before = len(sent)
                for m, optimizer in zip((compiled, eager_model), optimizers):
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(m(x), y).backward()
                    optimizer.step()
                allreduces_per_step.append(len(sent) - before)
        max_diff = max((a - b).abs().max().item() for a, b in zip(module.parameters(), twin.parameters()))
        return {"rank": rank, "graphs": graphs, "buckets": sent[-allreduces_per_step[-1]:],
                "allreduces_per_step": allreduces_per_step, "max_diff": max_diff}


def compiled_graphs_for(rank: int, world_size: int, settings: list[dict]) -> list[dict]:
    """``compiled_graphs`` once per entry of ``settings`` (its keyword arguments), in one job:
    one process start instead of one per setting. Dynamo's caches are cleared in between.

    Returns the list of ``compiled_graphs`` results, in the order of ``settings``.
    """
    with process_group(rank, world_size):  # compiled_graphs joins this group, not a new one
        results = []
        for kwargs in settings:
            torch._dynamo.reset()
            results.append(compiled_graphs(rank, world_size, **kwargs))
        return results


def small_bucket_error(rank: int, world_size: int, bucket_cap_mb: float = 0.5, seed: int = 0) -> dict:
    """Compile ``DeepNet()``, wrap it in ``DDP(..., bucket_cap_mb=...)`` with a cap below DDPOptimizer's 1 MiB first
    bucket and run one forward, where dynamo compiles; report what torch raised.

    Returns {"rank", "error": "ExceptionType: first line of its message", or None if nothing was raised}.
    """
    with process_group(rank, world_size) as device:
        torch._dynamo.reset()
        torch.manual_seed(seed)
        compiled = DDP(torch.compile(DeepNet().to(device), backend=lambda gm, example_inputs: gm.forward),
                       device_ids=device_ids_for(device), bucket_cap_mb=bucket_cap_mb)
        try:
            compiled(torch.randn(16, 2, device=device))
        except Exception as e:  # what the learner would see: the type and the first line
            return {"rank": rank, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}
        return {"rank": rank, "error": None}


# ---- helpers


class DeepNet(nn.Module):
    """Linear(2, width) -> ReLU -> depth x [Linear(width, width) -> ReLU] -> Linear(width, 2).

    A class of our own on purpose: dynamo does not trace the forward of torch.nn's own modules
    (nn.Sequential) when it meets it as a frame of its own, which is how DDP's forward calls the
    model it wraps. ``as_sequential`` gives the same layers as an nn.Sequential, to see that.
    """

    def __init__(self, width: int = 256, depth: int = 8) -> None:
        super().__init__()
        self.first = nn.Linear(2, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.last = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.last(x)

    def as_sequential(self) -> nn.Sequential:
        layers = [self.first, nn.ReLU()]
        for layer in self.hidden:
            layers += [layer, nn.ReLU()]
        return nn.Sequential(*layers, self.last)
