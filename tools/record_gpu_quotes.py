"""Record, on a machine with one or more CUDA GPUs, the messages that lesson 03 quotes for readers
without a GPU (``ddp_lib/demos/gpu_outcomes.py``), and write them as JSON:

    python tools/record_gpu_quotes.py OUT.json

Each case runs in its own process, with torch and nccl only (no ``ddp_lib``), so that it runs on any
GPU machine's torch. Cases that need two GPUs are left out on a machine with one; "duplicate_gpu"
is the exception: it puts two ranks on one GPU on purpose. ``gpu_outcomes.recorded_line`` compares the
recorded words with the quoted ones.
"""

import json
import os
import socket
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _one_process_group(**kwargs) -> None:
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, **kwargs)


def _error(fn) -> str:
    try:
        fn()
    except Exception as exc:  # the message torch gives is the record
        return f"{type(exc).__name__}: {exc}"
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return "no error"


def input_not_moved() -> list[str]:
    layer = torch.nn.Linear(10, 5).cuda(0)
    return [_error(lambda: layer(torch.randn(20, 10)))]


def input_moved_by_ddp() -> list[str]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    _one_process_group()
    seen = []
    model = torch.nn.Linear(10, 5).cuda(0)
    model.register_forward_pre_hook(lambda _module, args: seen.append(str(args[0].device)))
    out = DDP(model, device_ids=[0])(torch.randn(20, 10))
    dist.destroy_process_group()
    return [f"rank 0: model on cuda:0, input arrived on {seen[0]}, output on {out.device}"]


def device_id_out_of_range() -> list[str]:
    beyond = torch.cuda.device_count()
    return [_error(lambda: _one_process_group(device_id=torch.device("cuda", beyond)))]


def set_device_out_of_range() -> list[str]:
    beyond = torch.cuda.device_count()  # one past the last GPU this process sees
    return [f"rank {beyond}: torch.cuda.set_device({beyond}): " + _error(lambda: torch.cuda.set_device(beyond))]


def device_id_without_index() -> list[str]:
    return [_error(lambda: _one_process_group(device_id=torch.device("cuda")))]


def barrier_warning() -> list[str]:
    torch.cuda.set_device(0)
    _one_process_group()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.barrier()
    dist.destroy_process_group()
    return [f"{w.category.__name__}: {w.message}" for w in caught if "barrier" in str(w.message)]


def bound_device() -> list[str]:
    lines = []
    for given in (False, True):
        torch.cuda.set_device(0)
        _one_process_group(**({"device_id": torch.device("cuda", 0)} if given else {}))
        bound = dist.group.WORLD.bound_device_id
        dist.destroy_process_group()
        lines.append(f"device_id given: {given}  bound device: {None if bound is None else str(bound)}")
    return lines


def nccl_cpu_tensor() -> list[str]:
    _one_process_group()  # a one-rank nccl group: its only backend serves CUDA tensors
    return [_error(lambda: dist.all_reduce(torch.ones(1)))]


def checkpoint_on_gpus() -> list[str]:
    path = f"/tmp/checkpoint_on_gpus_{os.getpid()}.pt"
    torch.save(torch.nn.Linear(10, 5).cuda(0).state_dict(), path)
    try:
        saved_on = set()
        torch.load(path, map_location=lambda storage, location: saved_on.add(location) or storage)
        plain = torch.load(path)["weight"].device
        mapped = torch.load(path, map_location=torch.device("cuda", 0))["weight"].device
    finally:
        os.remove(path)
    return [f"rank 0: saved on {sorted(saved_on)}; loaded without map_location -> {plain}; "
            f"with map_location=device -> {mapped}"]


def _without_set_device(rank: int, world_size: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    said = _error(lambda: (dist.all_reduce(torch.ones(1, device="cuda")), torch.cuda.synchronize()))
    with open(f"{out}.{rank}", "w") as f:
        f.write(said)


def duplicate_gpu() -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = f"/tmp/duplicate_gpu_{os.getpid()}"
    try:
        mp.spawn(_without_set_device, args=(2, port, out), nprocs=2)
    except Exception as exc:
        return [f"mp.spawn: {type(exc).__name__}: {str(exc)[:300]}"]
    lines = []
    for rank in range(2):
        with open(f"{out}.{rank}") as f:
            lines.append(f"rank {rank}: {f.read()}")
    return lines


CASES = {f.__name__: f for f in (input_not_moved, input_moved_by_ddp, device_id_out_of_range,
                                   set_device_out_of_range, device_id_without_index, barrier_warning,
                                   bound_device, nccl_cpu_tensor, checkpoint_on_gpus, duplicate_gpu)}


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python tools/record_gpu_quotes.py OUT.json")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: nothing to record")
    record = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
              "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())), "cases": {}}
    for name, case in CASES.items():
        try:
            record["cases"][name] = case()
        except Exception as exc:
            record["cases"][name] = [f"the recording failed: {type(exc).__name__}: {exc}"]
        print(name, "->", *record["cases"][name], sep="\n  ", flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
