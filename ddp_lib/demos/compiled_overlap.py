"""Lesson 09: does an all-reduce start while a compiled backward still has work to do? DeepNet under
DDP, compiled with torch's ``aot_eager`` compilers (AOTAutograd, graphs run as traced), once with
dynamo's DDP graph split on and once with it off. The backward graphs and the comm hook log events
in one list, in the order they happen, each with its time; each all-reduce logs its start and its end.

    run_ranks(allreduces_during_backward, 2)
"""

import threading
import time

import torch
import torch.distributed as dist
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.backends.debugging import boxed_nop
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import device_ids_for, process_group
from ddp_lib.workers.compiled import DeepNet


def _one_setting(rank: int, device: torch.device, optimize_ddp: bool, steps: int, seed: int) -> dict:
    torch._dynamo.reset()
    torch.manual_seed(seed)
    events: list[str] = []
    times: list[float] = []  # time.perf_counter() of each event
    lock = threading.Lock()  # an all-reduce ends on the backend's thread

    def log(event: str) -> None:
        with lock:
            events.append(event)
            times.append(time.perf_counter())

    def logging_allreduce(_state: None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        log("all-reduce")

        def ended(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            log("all-reduce ends")  # DDP waits for this future before backward() returns
            return fut.value()

        return default_hooks.allreduce_hook(None, bucket).then(ended)

    def logging_backward(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        run = boxed_nop(gm, example_inputs)

        def logged(args: list) -> object:
            log("backward graph starts")
            out = run(args)
            log("backward graph ends")
            return out

        logged._boxed_call = True  # AOTAutograd passes the inputs as one list
        return logged

    backend = aot_autograd(fw_compiler=boxed_nop, bw_compiler=logging_backward)
    # Compile the module, then wrap it: the order lesson 09 recommends.
    compiled = DDP(torch.compile(DeepNet().to(device), backend=backend), device_ids=device_ids_for(device),
                   bucket_cap_mb=1.0)
    compiled.register_comm_hook(None, logging_allreduce)
    g = torch.Generator().manual_seed(seed + rank)
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        for _ in range(steps):  # the last step runs with DDP's rebuilt buckets
            events.clear()
            times.clear()
            x, y = torch.randn(16, 2, generator=g).to(device), torch.randint(0, 2, (16,), generator=g).to(device)
            torch.nn.functional.cross_entropy(compiled(x), y).backward()
    last_end = max(i for i, e in enumerate(events) if e == "backward graph ends")
    return {"backward_graphs": events.count("backward graph starts"), "allreduces": events.count("all-reduce"),
            "started_during_backward": events[:last_end].count("all-reduce"),
            "timeline": [(event, t - times[0]) for event, t in zip(events, times)]}


def allreduces_during_backward(rank: int, world_size: int, steps: int = 2, seed: int = 0) -> dict:
    """Per setting of dynamo's ``optimize_ddp`` (True, False): the backward graphs the last step ran,
    the all-reduces DDP started in it, how many of them started before the last backward graph ended,
    and its ``timeline``: each event ("backward graph starts", "backward graph ends", "all-reduce",
    "all-reduce ends") with its time in seconds from the step's first event.
    """
    with process_group(rank, world_size) as device:
        return {"rank": rank, **{f"optimize_ddp={flag}": _one_setting(rank, device, flag, steps, seed)
                                 for flag in (True, False)}}
