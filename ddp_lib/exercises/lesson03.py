"""Checkers for lesson 03's exercises: ``one_step`` uses LOCAL_RANK's device and calls ``set_device`` before
``init_process_group``; the prefix of a DDP wrapper's state_dict keys; ``load_on_device`` uses map_location."""

import contextlib
import os
import pathlib
import pkgutil
from collections.abc import Callable
from unittest import mock

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.parallel.distributed import _to_kwargs

from ddp_lib.errors import readable
from ddp_lib.exercises.checking import Report, check_on_ranks, load_worker, worker_name
from ddp_lib.workers.placement import simulate_nodes
from ddp_lib.workers.shared import ToyModel, param_checksum

LAYOUTS = {4: (2, "2 nodes x 2 ranks"), 3: (3, "1 node x 3 ranks")}  # world size: (processes per node, said)
LR = 0.01  # the exercise's learning rate
# 3 on rank 3 of the faked node, 2 on rank 2 of the simulated ones: the global rank, whichever way it was read.
GLOBAL_RANK_HINT = (" (that is the global rank, from RANK or from mp.spawn's rank argument: "
                    "read LOCAL_RANK instead)")
NODE = "on a node with 4 GPUs and 2 ranks (faked)"  # gpu_order's node: RANK % 4 differs from LOCAL_RANK % 4
# Tried before checking.SHARED_HINTS, whose GPU hint is about process_group, which this exercise does not use.
HINTS = ((r"device_id parameter must be an accelerator|device_id .* does not match the current compilation",
          "device_id= is for a GPU: pass it only where CUDA is available, and call "
          "init_process_group(\"gloo\", rank=rank, world_size=world_size) without it on the CPU"),
         (r"device_ids", "device_ids is for a model on one GPU; with a CPU model pass device_ids=None"),
         (r"accelerator|CUDA|cuda", "the checker's ranks see no GPU: where torch.cuda.is_available() is False, "
          "use device cpu and \"gloo\", with no set_device and no device_id="))


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().double().cpu().reshape(-1) for t in tensors])


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """In each rank: the learner's result, and its first ToyModel's weights before, own gradient and weights after."""
    # The simulated nodes all run on this machine: on GPUs, two ranks would get one GPU, which nccl refuses.
    # So the ranks see no GPU (read when CUDA starts in the process) and run the learner's CPU lines on gloo.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    torch.manual_seed(int.from_bytes(os.urandom(8), "little"))  # weights and batch of this rank's own
    load_worker(target)  # read the learner's file fresh
    seen: dict = {}

    def on_forward(module, args):
        if isinstance(module, ToyModel) and "model" not in seen:
            seen.update(model=module, before=_flat(module.parameters()), grads={})
            for i, param in enumerate(module.parameters()):  # p.grad may become the very tensor recorded: a copy
                param.register_hook(lambda grad, i=i: seen["grads"].update({i: grad.detach().clone()}))

    register_module_forward_pre_hook(on_forward)  # for the rest of this rank's process
    result = simulate_nodes(rank, world_size, LAYOUTS[world_size][0], target)
    if "model" not in seen:
        return {"result": result, "watched": None}
    model, grads = seen["model"], seen["grads"]
    local_grad = _flat(grads[i] for i in sorted(grads)) if len(grads) == len(list(model.parameters())) else None
    return {"result": result, "watched": {"before": seen["before"], "after": _flat(model.parameters()),
                                          "checksum": param_checksum(model), "local_grad": local_grad}}


def diagnose(runs: list[dict]) -> str | None:
    """The first mistake found in one layout's runs, named with its fix (None: all is right)."""
    for rank, run in enumerate(runs):
        result, watched, local_rank = run["result"], run["watched"], rank % LAYOUTS[len(runs)][0]
        if not isinstance(result, dict) or not {"local_rank", "device", "checksum"} <= set(result):
            return f"rank {rank} returned {result!r}; return a dict with keys 'local_rank', 'device' and 'checksum'"
        if result["local_rank"] != local_rank:
            hint = GLOBAL_RANK_HINT if result["local_rank"] == rank else ""
            return (f"rank {rank} (node {rank // LAYOUTS[len(runs)][0]}) used local_rank {result['local_rank']}, "
                    f"expected {local_rank}{hint}")
        if str(result["device"]) != "cpu":  # the ranks see no GPU (_run_learner)
            return f"rank {rank} used device {result['device']}, expected cpu: its ranks see no GPU"
        if watched is None:
            return f"rank {rank} never called a ToyModel: wrap ToyModel in DDP and call the DDP model on the batch"
        if watched["checksum"] != run["result"]["checksum"]:
            return (f"rank {rank} returned checksum {run['result']['checksum']}, but the model it trained has "
                    f"{watched['checksum']}: return param_checksum of that model")
        if watched["local_grad"] is None:
            return f"rank {rank} computed no gradient: call backward() on a loss computed through the DDP model"
        if not torch.allclose(watched["before"], runs[0]["watched"]["before"], rtol=0, atol=1e-6):
            return (f"rank {rank} fed its batch to weights that differ from rank 0's: wrap the model in DDP, which "
                    "copies rank 0's weights to every rank, before the forward pass")
    mean_grad = torch.stack([run["watched"]["local_grad"] for run in runs]).mean(0)
    for rank, run in enumerate(runs):
        step = run["watched"]["after"] - run["watched"]["before"]
        if torch.allclose(step, -LR * mean_grad, atol=1e-6):
            continue
        if step.norm() == 0:
            return f"rank {rank}'s parameters did not change: take an optimizer step after backward()"
        if torch.allclose(step, -LR * run["watched"]["local_grad"], atol=1e-6):
            return f"rank {rank} stepped along its own gradient only: call backward() through the DDP model"
        lr = (-(step @ mean_grad) / (mean_grad @ mean_grad)).item()  # the step's length along the mean gradient
        divisor = len(runs) * LR / lr if lr > 0 else 0  # the sum of the gradients divided by a constant?
        if divisor and torch.allclose(step, -lr * mean_grad, atol=1e-6):
            return (f"rank {rank} stepped along the sum of the gradients divided by {round(divisor)}, a constant: "
                    "divide by the world size (DDP does)" if abs(divisor - round(divisor)) < 1e-3 else
                    f"rank {rank} stepped with a learning rate of {lr:.3g}: use torch.optim.SGD(..., lr={LR})")
        return (f"rank {rank}'s step is not -{LR} times the mean of all ranks' gradients: wrap ToyModel in DDP, "
                f"call backward() on ddp_model(x).sum(), then one torch.optim.SGD step with lr={LR}")
    return None


class _ForwardSeen(Exception):
    """Raised at the faked node's first ToyModel forward, once its devices are recorded: nothing after it is run."""


class _ToyModelOnFakeGpu(ToyModel):
    """ToyModel for ``gpu_order``'s faked node: ``.to(cuda:i)`` gives weights on a fake ``cuda:i`` (a shape and a
    device, no values), as ``fake_gpus`` makes them, so a CPU build can place it."""

    def __init__(self, *args, **kwargs) -> None:
        with unset_fake_temporarily():  # real weights first: fake mode cannot move its own parameters
            super().__init__(*args, **kwargs)

    def to(self, *args, **kwargs):
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
        if device is None or device.type != "cuda":
            return super().to(*args, **kwargs)
        with unset_fake_temporarily():
            super().to("meta")  # the layers, with no values
        return self.to_empty(device=device)  # in fake mode: weights "on" cuda:i


def _ddp_recorder(seen: dict, current_device: Callable[[], int | None]) -> type:
    """A stand-in for DistributedDataParallel that records ``device_ids`` and, in its forward, moves the inputs as
    DDP's forward does (with ``device_ids=[i]``: DDP's own move to cuda:i; with None: nothing)."""

    class DDPRecorder(torch.nn.Module):
        def __init__(self, module, device_ids=None, *args, **kwargs) -> None:
            super().__init__()
            self.module, self.device_ids = module, device_ids
            seen["device_ids"] = device_ids

        def forward(self, *inputs, **kwargs):
            if self.device_ids:
                first = self.device_ids[0]
                index = first.index if isinstance(first, torch.device) else first
                index = current_device() if index is None else index  # [None]: DDP takes the current device
                # DDP passes True, a side stream for the copy: it changes when the copy runs, not where the
                # tensor lands. A CPU build has no stream for a (fake) CUDA tensor, so the plain move here.
                inputs, kwargs = _to_kwargs(inputs, kwargs, torch.device("cuda", index), False)
                inputs, kwargs = inputs[0], kwargs[0]
            return self.module(*inputs, **kwargs)

    return DDPRecorder


def _placement_problem(seen: dict) -> str | None:
    """The mistake in where the faked node's forward found its input, from ``gpu_order``'s record (None: right)."""
    if "model_on" not in seen:
        return None  # no ToyModel forward ran on the faked node; the real runs check the rest
    model_on, input_on, device_ids = seen["model_on"], seen["input_on"], seen.get("device_ids", "none")
    if model_on != "cuda:1":
        return (f"{NODE}, rank 3's model was on {model_on} at its forward: move it to the rank's device "
                "(cuda:1) with .to(device) before wrapping it in DDP")
    if input_on == model_on:
        return None
    if device_ids == "none":
        return (f"{NODE}, rank 3 called its model, on cuda:1, with an input on {input_on}: move the input "
                "with .to(device)")
    if not device_ids:
        return (f"{NODE}, rank 3 wrapped its model, on cuda:1, in DDP with device_ids={device_ids!r} and "
                f"passed an input on {input_on}; DDP then moves nothing, and on a GPU the first layer fails. "
                "Pass device_ids=[device.index] to DDP, or move the input with .to(device)")
    hint = GLOBAL_RANK_HINT if input_on == "cuda:3" else ""
    return (f"{NODE}, rank 3 passed device_ids={device_ids!r} to DDP, which moved the input to {input_on}, "
            f"but the model is on cuda:1{hint}: pass device_ids=[device.index]")


def gpu_order(fn: Callable, joined: list | None = None, seen: dict | None = None) -> str | None:
    """Run ``fn(3, 4)`` in this process as rank 3, LOCAL_RANK 1, on a node said to have 4 CUDA GPUs, up to its
    its first ToyModel forward (or the first error after ``init_process_group``).
    ``torch.cuda.is_available``, ``device_count``, ``set_device`` and ``dist.init_process_group`` are
    stand-ins that record their calls, so no GPU is needed. After the join, tensors are fake (a shape and a
    device, no values), ``ToyModel`` goes to a fake ``cuda:1``, and ``DistributedDataParallel`` records its
    ``device_ids`` and moves the inputs as DDP's forward does. Returns the first mistake in the GPU lines
    (set_device first, on cuda:1; then nccl with device_id=cuda:1; then the input reaching the model on
    cuda:1: device_ids=[1], or the input moved by the worker), or None. The node runs 2 ranks on 4 GPUs,
    so RANK % 4 = 3 differs from LOCAL_RANK % 4 = 1: with as many GPUs as ranks per node, RANK % GPUs would
    equal LOCAL_RANK, and an answer that reads RANK would pass here. ``joined``, if given, gets the backend
    argument of the first ``init_process_group`` call (None where none was passed); ``seen``, if given, gets
    the devices the faked forward found ("model_on", "input_on") and the ``device_ids`` passed to DDP."""
    calls: list[tuple] = []
    seen = {} if seen is None else seen
    fake_mode: list = []  # entered by the faked init_process_group, left with the other stand-ins

    def set_device(device) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        calls.append(("set_device", index))

    def init_process_group(backend=None, *args, **kwargs):
        device_id = kwargs.get("device_id")
        calls.append(("init_process_group", backend,
                      device_id if isinstance(device_id, int) or device_id is None else torch.device(device_id).index))
        if not fake_mode:  # from here on, tensors have a device but no values: a CPU build can "hold" cuda:1
            fake_mode.append(FakeTensorMode(allow_non_fake_inputs=True))
            stack.enter_context(fake_mode[0])

    def current_device() -> int | None:
        devices = [call[1] for call in calls if call[0] == "set_device"]
        return devices[-1] if devices else 0

    def on_forward(module, args):
        if isinstance(module, _ToyModelOnFakeGpu) and args and isinstance(args[0], torch.Tensor):
            seen.update(model_on=str(next(module.parameters()).device), input_on=str(args[0].device))
            raise _ForwardSeen  # the devices are all this run is for

    stand_ins = {"torch.cuda.is_available": lambda: True, "torch.cuda.device_count": lambda: 4,
                 "torch.cuda.set_device": set_device, "torch.accelerator.set_device_index": set_device,
                 "torch.distributed.init_process_group": init_process_group,
                 "torch.distributed.distributed_c10d.init_process_group": init_process_group,
                 # a group this process may really be in is left alone
                 "torch.distributed.destroy_process_group": lambda *args, **kwargs: None,
                 "torch.distributed.distributed_c10d.destroy_process_group": lambda *args, **kwargs: None,
                 "torch.nn.parallel.DistributedDataParallel": _ddp_recorder(seen, current_device),
                 "torch.nn.parallel.distributed.DistributedDataParallel": _ddp_recorder(seen, current_device),
                 "ddp_lib.workers.shared.ToyModel": _ToyModelOnFakeGpu}
    originals = {name: pkgutil.resolve_name(name) for name in stand_ins}
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    with mock.patch.dict(os.environ, env):
        with contextlib.ExitStack() as stack:
            stack.callback(register_module_forward_pre_hook(on_forward).remove)
            for name, stand_in in stand_ins.items():
                stack.enter_context(mock.patch(name, stand_in))
            for global_name, value in list(fn.__globals__.items()):  # from torch.cuda import set_device, ...
                for name, original in originals.items():
                    if value is original:
                        stack.enter_context(mock.patch.dict(fn.__globals__, {global_name: stand_ins[name]}))
            try:
                fn(3, 4)
            except _ForwardSeen:
                pass
            except Exception as error:  # after the join: the faked GPU cannot hold a model. Before it: theirs
                if not any(call[0] == "init_process_group" for call in calls):
                    said = str(error).splitlines()[0][:120] if str(error) else ""
                    if isinstance(error, NotImplementedError):  # the stub: its message says what to write
                        return f"rank 3 raised NotImplementedError: {said}"
                    return (f"{NODE}, rank 3 raised {type(error).__name__}: {said}; only "
                            "torch.cuda.is_available, device_count, set_device and dist.init_process_group are "
                            "faked: call those yourself, and build the model after init_process_group")
    joins = [i for i, call in enumerate(calls) if call[0] == "init_process_group"]
    if not joins:
        return f"{NODE}, rank 3 never called dist.init_process_group: join the group yourself"
    _, backend, device_id = calls[joins[0]]
    if joined is not None:
        joined.append(backend)
    devices = [call[1] for call in calls[:joins[0]] if call[0] == "set_device"]
    if not devices:
        later = " (it came after init_process_group)" if any(call[0] == "set_device" for call in calls) else ""
        return (f"{NODE}, rank 3 did not call torch.cuda.set_device before "
                f"init_process_group{later}: call it first, with the rank's device. That order is this "
                "lesson's convention, which this exercise checks; torch itself needs set_device only before "
                "the first work that uses the current device")
    if devices[-1] != 1:
        hint = GLOBAL_RANK_HINT if devices[-1] == 3 else ""
        return (f"{NODE}, rank 3 (LOCAL_RANK 1) called set_device({devices[-1]}){hint}: "
                "expected cuda:1")
    if backend is not None and "nccl" not in str(backend):
        return f"{NODE}, rank 3 joined with backend {backend!r}: use \"nccl\" for CUDA GPUs"
    if device_id != 1:
        return (f"{NODE}, rank 3 passed device_id={device_id} to init_process_group: "
                "pass device_id=device, the rank's GPU (cuda:1)")
    return _placement_problem(seen)


def check_device_worker(fn: Callable, timeout: float = 120):
    """A report on ``fn(rank, world_size)``: first its GPU lines on a faked GPU node (``gpu_order``), then
    real runs on 2 simulated nodes x 2 ranks and 1 node x 3; stops at a failure. The real runs are on the CPU
    (gloo) on every machine: their ranks all run here, so on GPUs two of them would share one, and they are
    started with ``CUDA_VISIBLE_DEVICES=""``. A machine with CUDA runs the learner's CPU branch there too."""
    joined: list = []
    seen: dict = {}
    problem = gpu_order(fn, joined, seen)
    if problem is not None:
        report = Report()
        report.fail(problem)
        return report
    report = check_on_ranks(_run_learner, tuple(LAYOUTS), diagnose, (worker_name(fn),), stop=True,
                          where=lambda runs: LAYOUTS[len(runs)][1], timeout=timeout, hints=HINTS,
                          passed=lambda runs: f"every rank used its LOCAL_RANK's device "
                          f"({', '.join(run['result']['device'] for run in runs)}) and stepped along the average "
                          "of all ranks' gradients to the same parameters")
    backend = f'"{joined[0]}", ' if joined and joined[0] is not None else ""  # as the learner wrote it
    forward = f"; the forward's input reached the model on {seen['input_on']}" if "input_on" in seen else ""
    report.lines.insert(0, f"PASS {NODE}: set_device(cuda:1), then init_process_group({backend}device_id=cuda:1)"
                           f"{forward}")
    return report


# Exercise 2: the keys of ddp_model.state_dict().
def ddp_state_dict_keys() -> list[str]:
    """The keys of a DDP-wrapped ToyModel's ``state_dict()``, from a one-process gloo group made in this
    process on an in-memory store (no process is started)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return list(DDP(ToyModel()).state_dict())
    finally:
        dist.destroy_process_group()


def check_state_dict_prefix(prefix) -> Report:
    """A report on ``prefix``: every key of ``ddp_model.state_dict()`` must start with it, and without it
    the keys must be a plain ToyModel's, so that the stripped dict loads into ``ToyModel()``."""
    report = Report()
    if not isinstance(prefix, str) or not prefix:
        report.fail("set prefix to the text that every key of ddp_model.state_dict() starts with")
        return report
    keys, plain = ddp_state_dict_keys(), list(ToyModel().state_dict())
    if not all(key.startswith(prefix) for key in keys):
        report.fail(f"not every key of ddp_model.state_dict() starts with {prefix!r}; one of them is {keys[0]!r}")
        return report
    if [key[len(prefix):] for key in keys] != plain:
        report.fail(f"every key starts with {prefix!r}, but without it the keys are not a plain ToyModel's "
                    f"({', '.join(plain)}); one of ddp_model.state_dict()'s keys is {keys[0]!r}")
        return report
    report.ok(f"every key of ddp_model.state_dict() is {prefix!r} + a plain ToyModel's key ({', '.join(keys)}); "
              "save ddp_model.module.state_dict() to leave it out")
    return report


# Exercise 3: a checkpoint saved on cuda:0, loaded onto the rank's own device.
CUDA_CHECKPOINT = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "data" / "saved_on_cuda0.pt"
# cpu, then meta: a second device that every machine has, so a device written into the code shows.
LOAD_DEVICES = (torch.device("cpu"), torch.device("meta"))


def check_load_on_device(fn: Callable, path: str | pathlib.Path = CUDA_CHECKPOINT) -> Report:
    """A report on ``fn(path, device)``: every tensor of a cuda:0 checkpoint must come back on ``device``."""
    report = Report()
    saved = torch.load(path, map_location="cpu")
    for device in LOAD_DEVICES:
        try:
            state = fn(str(path), device)
        except Exception as error:  # the learner's own error, reported in one line
            fix = "; pass map_location=device to torch.load" if "CUDA device" in str(error) else ""
            said = readable(str(error).splitlines()[0].split(". ")[0] if str(error) else "", 120)  # one sentence
            report.fail(f"loading onto {device} raised {type(error).__name__}: {said}{fix}")
            return report
        if not isinstance(state, dict) or set(state) != set(saved):
            report.fail(f"loading onto {device} returned {type(state).__name__}: return the dict torch.load gives, "
                        f"with keys {sorted(saved)}")
            return report
        wrong = sorted({str(tensor.device) for tensor in state.values() if tensor.device != device})
        if wrong:
            report.fail(f"loading onto {device} left tensors on {', '.join(wrong)}: pass map_location=device, "
                        "the function's argument, not a device written in the code")
            return report
        if device.type != "meta" and not all(torch.equal(state[key], saved[key]) for key in saved):
            report.fail(f"loading onto {device} changed the values: return what torch.load gives, unchanged")
            return report
        report.ok(f"every tensor of the cuda:0 checkpoint came back on {device}")
    return report
