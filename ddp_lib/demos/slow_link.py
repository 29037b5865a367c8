"""Lesson 08's overlap control: DDP steps whose communication waits on a slow link, not on the CPU.

A comm hook all-reduces each bucket, then hands it to a "link" thread. The link passes the buckets
one after another and sleeps ``bytes / link_bytes_per_s`` for each, as a slow network would. The
real all-reduce still runs on the cores; only the added sleep uses none, so that wait can run beside
backward the way nccl's runs on a GPU stream. Small buckets and one bucket, each its own copy of the
same model, are stepped in paired rounds; the order alternates from round to round.

    python -m ddp_lib.demos.slow_link > ddp_lib/demos/recorded/slow_link.json   # a new kept run
"""

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import process_group

KEPT_RUN = Path(__file__).with_name("recorded") / "slow_link.json"
WIDTH, LAYERS, BATCH = 512, 4, 256  # four 1 MiB weights: one bucket each at a 1 MiB cap
LINK_BYTES_PER_S = 25e6  # 4.2 MB of gradients take 168 ms on the link
CAPS_MB = {"small buckets": 1.0, "one bucket": 25.0}


class SlowLink:
    """One thread that passes each all-reduced bucket on after ``bytes / bytes_per_s`` seconds of
    sleep, one bucket at a time, and then completes the bucket's future."""

    def __init__(self, bytes_per_s: float):
        self.bytes_per_s, self.jobs = bytes_per_s, queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            work, tensor, future = self.jobs.get()
            work.wait()  # the real all-reduce, run by gloo's threads
            time.sleep(tensor.numel() * tensor.element_size() / self.bytes_per_s)  # the slow link: no CPU
            future.set_result(tensor)

    def hook(self, process_group, bucket) -> torch.futures.Future:
        """A DDP comm hook: average the bucket, then send it over the link."""
        tensor = bucket.buffer().div_(dist.get_world_size())
        future = torch.futures.Future()
        self.jobs.put((dist.all_reduce(tensor, async_op=True), tensor, future))
        return future


def slow_link_steps(rank: int, world_size: int, rounds: int = 15, link_bytes_per_s: float = LINK_BYTES_PER_S) -> dict:
    """Returns {"rank", "step_ms" ({cap label: step times in ms, one per round}), "buckets"
    ({cap label: all-reduces per step}), "first" ({cap label: rounds it went first})}. Each cap steps
    its own copy of the model, with the same initial weights. Each round steps both copies, each
    after a barrier, in an order that alternates from round to round."""
    with process_group(rank, world_size):
        link = SlowLink(link_bytes_per_s)
        models, counts = {}, {}
        for label, cap in CAPS_MB.items():
            torch.manual_seed(0)  # the same weights in both copies; no layer is shared between them
            layers = [m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())]
            model = DDP(nn.Sequential(*layers, nn.Linear(WIDTH, 1)), bucket_cap_mb=cap)
            counts[label] = [0]

            def counting_hook(state, bucket, counter=counts[label]):
                counter[0] += 1
                return link.hook(state, bucket)

            model.register_comm_hook(None, counting_hook)
            models[label] = (model, torch.optim.SGD(model.parameters(), lr=1e-3))
        x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(rank))
        step_ms = {label: [] for label in models}
        first = {label: 0 for label in models}
        for round_ in range(rounds + 2):  # two warm-up rounds: DDP rebuilds its buckets after step 1
            order = list(models) if round_ % 2 == 0 else list(reversed(models))
            if round_ >= 2:
                first[order[0]] += 1
            for label in order:
                model, optimizer = models[label]
                counts[label][0] = 0
                dist.barrier()
                start = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                model(x).square().mean().backward()  # returns once every bucket has passed the link
                optimizer.step()
                if round_ >= 2:
                    step_ms[label].append(round((time.perf_counter() - start) * 1e3, 2))
        return {"rank": rank, "step_ms": step_ms, "buckets": {label: c[0] for label, c in counts.items()},
                "first": first, "gradient_bytes": 4 * sum(p.numel() for p in models["one bucket"][0].parameters())}


def kept_run() -> dict:
    return json.loads(KEPT_RUN.read_text())


def main() -> int:
    from ddp_lib.launch import run_ranks

    results = run_ranks(slow_link_steps, 2, show_output=False)
    rank0 = results[0]
    print(json.dumps({"step_ms": rank0["step_ms"], "buckets": rank0["buckets"], "first": rank0["first"],
                      "gradient_bytes": rank0["gradient_bytes"], "cpu_count": os.cpu_count(),
                      "load_average": round(os.getloadavg()[0], 1),
                      "link_bytes_per_s": LINK_BYTES_PER_S}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
