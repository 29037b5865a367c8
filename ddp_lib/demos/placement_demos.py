"""Lesson 03's small demonstrations: DDP's input-moving and barrier lines, ``output_device`` on a CPU
model, a CUDA-only group, the launch variables ``mp.spawn`` sets, loading a checkpoint, a child process's GPU
count, and what ``init_process_group(device_id=...)`` changes (nccl, GPUs only)."""

from __future__ import annotations

import contextlib
import inspect
import os
import subprocess
import sys
import warnings
from unittest import mock

import torch
import torch.distributed as dist

from ddp_lib.demos.source_lines import source_text


def bound_device(rank: int, world_size: int, use_device_id: bool) -> dict:
    """Join an nccl group after ``set_device(local_rank)``, with or without ``device_id``; return
    the group's ``bound_device_id`` (set only from ``device_id``: None without it) and the sum of
    an all-reduce of ones."""
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=world_size,
                            device_id=device if use_device_id else None)
    try:
        bound = dist.group.WORLD.bound_device_id
        tensor = torch.ones(1, device=device)
        dist.all_reduce(tensor)
        return {"bound_device_id": None if bound is None else str(bound), "sum": tensor.item()}
    finally:
        dist.destroy_process_group()


def barrier_warnings(rank: int, world_size: int, backend: str = "nccl") -> list[str]:
    """Join a group after ``set_device`` (on a GPU), without ``device_id=``, and call ``barrier()``;
    return the warnings it gave, as "Category: message". Under nccl, rank 0 warns that it uses the
    current device; gloo's barrier runs on the CPU and gives none."""
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist.barrier()
        return [f"{w.category.__name__}: {w.message}" for w in caught]
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _stderr_silenced():
    """Send this process's file descriptor 2 to /dev/null for the block. Destroying a "cuda:gloo"
    group makes torch 2.13's C++ side print "No backend of type 0 found ..." there, with a
    timestamp, and whether a notebook shows it depends on timing."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def destroy_group_quietly() -> None:
    with _stderr_silenced():
        dist.destroy_process_group()


def _source_lines(fn, first: str, last: str) -> str:
    """The lines of ``fn``'s source from the first line starting with ``first`` to the next one
    starting with ``last``, dedented, under a comment naming where they come from."""
    try:
        text = source_text(fn, first, last)
    except ValueError:
        raise RuntimeError(f"torch {torch.__version__} changed {fn.__qualname__}: "
                           f"{first!r} ... {last!r} not found") from None
    return f"# {fn.__module__}.{fn.__qualname__}\n{text}"


def ddp_moves_inputs_source() -> str:
    """The lines of DDP's ``_pre_forward`` (run by ``forward``) that copy the inputs to
    ``device_ids[0]``: only when ``device_ids`` is set."""
    from torch.nn.parallel import DistributedDataParallel

    return _source_lines(DistributedDataParallel._pre_forward, "if self.device_ids:",
                         "args, kwargs = moved_inputs[0], moved_kwargs[0]")


def cuda_only_group_with_cpu_tensor(backend: str = "cuda:gloo") -> str:
    """Join a one-process group with ``backend``, all-reduce a CPU tensor, and return torch's error as
    "Type: message", or "no error" (runs without a GPU). With "cuda:gloo", the group's only backend
    serves CUDA tensors, so nothing in it can take a CPU tensor; "cpu:gloo,cuda:gloo" adds one that can."""
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        dist.all_reduce(torch.ones(1))
        return "no error"
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        destroy_group_quietly()


def ddp_of_cpu_model_in_group(backend: str = "cuda:gloo") -> str:
    """Join a one-process group with ``backend`` and wrap a CPU ``nn.Linear`` in DDP with
    ``device_ids=None``, as after a forgotten ``model.to(device)``; return torch's error as
    "Type: message", or "no error". DDP's constructor checks the parameters with a collective on their
    device, so a group with no backend for CPU tensors fails there, before any forward."""
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        DistributedDataParallel(torch.nn.Linear(2, 2))
        return "no error"
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        destroy_group_quietly()


def backends_without_a_name(accelerator: str | None = None) -> dict[str, str]:
    """The backend per device type that ``init_process_group()`` with no backend name gives its group:
    torch's own table (``BackendConfig``) for ``Backend.UNDEFINED``. ``accelerator`` ("cuda", ...)
    fakes the accelerator that torch reports; None uses this build's. Makes no group."""
    c10d = dist.distributed_c10d
    with contextlib.ExitStack() as stack:
        if accelerator is not None:
            stack.enter_context(mock.patch("torch._C._get_accelerator",
                                           return_value=torch.device(accelerator)))
        config = c10d.BackendConfig(dist.Backend(c10d.Backend.UNDEFINED))
        return {device: str(backend) for device, backend in config.get_device_backend_map().items()}


class _PastTheCheck(Exception):
    """Raised by the stand-in that ``init_process_group`` calls right after its check of ``device_id``."""


def device_id_check(device_id: torch.device, gpus: int) -> str:
    """Run ``init_process_group``'s own check of ``device_id``, in this process, as on a node with
    ``gpus`` CUDA GPUs: ``torch.accelerator`` is faked to report them. The call is stopped right after
    the check (``_get_default_timeout``, the next function it calls, raises), so no group is made.
    Returns "accepted", or the check's error as "ValueError: ..."."""
    if dist.is_initialized():  # init_process_group would refuse before the check: "twice"
        raise RuntimeError("device_id_check needs a process that has no default group")
    c10d = dist.distributed_c10d
    with mock.patch("torch.accelerator.current_accelerator", return_value=torch.device("cuda")), \
            mock.patch("torch.accelerator.device_count", return_value=gpus), \
            mock.patch.object(c10d, "_get_default_timeout", side_effect=_PastTheCheck):
        try:
            dist.init_process_group("nccl", device_id=device_id)
        except _PastTheCheck:
            return "accepted"
        except ValueError as error:
            return f"ValueError: {error}"
    raise AssertionError("init_process_group returned without reaching _get_default_timeout")


def device_id_verdict(device: str | torch.device, gpus: int = 2) -> str:
    """``device_id_check`` for ``device`` (a ``torch.device`` or a string such as "cuda:1") on a node
    faked to have ``gpus`` GPUs, cut to its first sentence: "accepted", or
    "ValueError: device_id cuda:2 is out of range"."""
    return device_id_check(torch.device(device), gpus=gpus).split(". ")[0]


def load_and_report(path: str, map_location=None) -> str:
    """``torch.load(path, map_location=...)``; return where its tensors landed, or torch's error as
    "Type: message"."""
    try:
        state = torch.load(path, map_location=map_location)
    except RuntimeError as e:
        return f"{type(e).__name__}: {e}"
    return "loaded; tensors on " + ", ".join(sorted({str(t.device) for t in state.values()}))


# What a fresh process reports about its GPUs: the variable as it sees it, and torch's count.
_GPU_REPORT = ("import os, torch; print(os.environ.get('CUDA_VISIBLE_DEVICES', '(not set)'), "
               "torch.cuda.device_count(), sep='|')")


def gpus_seen_by_a_child(cuda_visible_devices: str | None) -> dict:
    """Start a fresh Python process with ``CUDA_VISIBLE_DEVICES`` set to ``cuda_visible_devices``
    (None: removed) and return what it reports: the variable and ``torch.cuda.device_count()``.
    A child process, because CUDA reads the variable once, when a process first uses it."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    report = subprocess.run([sys.executable, "-c", _GPU_REPORT], env=env, capture_output=True, text=True,
                            check=True, timeout=300).stdout.strip()
    variable, count = report.split("|")
    return {"CUDA_VISIBLE_DEVICES": variable, "device_count": int(count)}


# The variables torchrun sets for each rank (lesson 02), in the order the lesson names them.
LAUNCH_VARIABLES = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _report_launch_variables(rank: int, queue) -> None:
    queue.put((rank, [name for name in LAUNCH_VARIABLES if name in os.environ]))


def launch_variables_under_spawn(nprocs: int = 2) -> dict[int, list[str]]:
    """Start ``nprocs`` processes with torch's own ``mp.spawn``, from a parent whose environment holds
    none of ``LAUNCH_VARIABLES`` (removed for the call), and return, per rank, those each child sees."""
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    with mock.patch.dict(os.environ):
        for name in LAUNCH_VARIABLES:
            os.environ.pop(name, None)
        torch.multiprocessing.spawn(_report_launch_variables, args=(queue,), nprocs=nprocs)
    return dict(sorted(queue.get() for _ in range(nprocs)))


def visible_gpus(cuda_visible_devices: str) -> list[int | str]:
    """The machine's GPU numbers that ``CUDA_VISIBLE_DEVICES=cuda_visible_devices`` lists, in the order
    the process numbers them ``cuda:0``, ``cuda:1``, ...: torch's own parser of the variable, which
    runs without a GPU (the cut at the machine's GPU count needs GPUs and is not applied)."""
    from unittest import mock

    with mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": cuda_visible_devices}):
        return list(torch.cuda._parse_visible_devices())  # numbers, or GPU UUIDs as strings


def documented(fn, first_words: str) -> str:
    """The paragraph of ``fn``'s documentation that starts with ``first_words``: that line and the
    more indented lines after it, under a comment naming the function."""
    lines = inspect.getdoc(fn).splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(first_words)), None)
    if start is None:
        raise RuntimeError(f"torch {torch.__version__} changed {fn.__qualname__}'s documentation: {first_words!r}")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and lines[end].strip() and len(lines[end]) - len(lines[end].lstrip()) > indent:
        end += 1
    return (f"# from the documentation of {fn.__module__}.{fn.__qualname__}\n"
            + "\n".join(line[indent:] for line in lines[start:end]))
