"""Lesson 03: DDP's input move on GPUs that a CPU build can pretend to have.

torch's fake tensors (``FakeTensorMode``) carry a shape and a device but no values, so a CPU build can
make a model "on cuda:0" and run its forward: each operator checks its tensors' devices as on a GPU,
and computes nothing. The input is moved by the function DDP's forward calls with ``device_ids=[i]``
(``_to_kwargs``, with DDP's default side-stream setting), so the move is DDP's own code, not a copy of it.
"""

from __future__ import annotations

import dataclasses

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.parallel.distributed import _to_kwargs

from ddp_lib.workers.shared import ToyModel


def _forward_report(model: torch.nn.Module, inputs: torch.Tensor) -> str:
    """Run ``model(inputs)`` without gradients: where the input and the output were, or the error."""
    try:
        with torch.no_grad():
            output = model(inputs)
    except RuntimeError as e:  # a fake-tensor subclass of RuntimeError; a GPU raises RuntimeError itself
        return f"RuntimeError: {e}"
    return f"input arrived on {inputs.device}, output on {output.device}"


def forward_on_fake_gpu(model_gpu: int, device_ids: list[int] | None, move_input: bool = False) -> str:
    """The classic example's forward on a model placed on ``cuda:<model_gpu>``, with fake tensors.

    Args:
        model_gpu: the GPU index the model's weights are on.
        device_ids: what ``DDP(model, device_ids=...)`` would get; a list of one index moves the input there,
            ``None`` moves nothing, as in DDP's forward.
        move_input: write ``.to(device)`` yourself first, with the model's device.
    Returns one line: where the input arrived and where the output is, or torch's error as "RuntimeError: message".
    """
    device = torch.device("cuda", model_gpu)
    shapes_only = ToyModel().to("meta")  # the layers, with no values
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = shapes_only.to_empty(device=device)  # weights "on" cuda:<model_gpu>, values never computed
        model.requires_grad_(False)  # no autograd: a CPU build cannot record a graph for a CUDA tensor
        inputs = torch.randn(20, 10)  # made on the CPU, as in the classic example
        if move_input:
            inputs = inputs.to(device)
        if device_ids:  # DDP's forward, with device_ids=[i]: move the inputs to cuda:i
            moved_args, _ = _to_kwargs((inputs,), {}, torch.device("cuda", device_ids[0]), True)
            inputs = moved_args[0][0]
        return _forward_report(model, inputs)


def ddp_move_keeps_a_moved_tensor(gpu: int = 1) -> bool:
    """A fake tensor already on ``cuda:<gpu>``, as after your own ``.to(device)``, passed through the move
    DDP's forward makes with ``device_ids=[gpu]``. Returns whether it came back as the same object (no copy)."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        t = torch.ones(2).to(torch.device("cuda", gpu))
        moved_args, _ = _to_kwargs((t,), {}, torch.device("cuda", gpu), True)
        return moved_args[0][0] is t


@dataclasses.dataclass
class Batch:
    """A batch as a dataclass, which DDP's input move does not open."""
    x: torch.Tensor
    labels: torch.Tensor


def ddp_move_of_batches(gpu: int = 1) -> list[str]:
    """A dict batch and a dataclass batch, made on the CPU, passed through the move DDP's forward makes with
    ``device_ids=[gpu]``, with fake tensors. Returns one line per batch: where each of its tensors ended up."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        batches = {"dict": {"x": torch.ones(2), "labels": torch.ones(2)},
                   "dataclass": Batch(torch.ones(2), torch.ones(2))}
        lines = []
        for kind, batch in batches.items():
            moved_args, _ = _to_kwargs((batch,), {}, torch.device("cuda", gpu), True)
            moved = moved_args[0][0]
            fields = moved if isinstance(moved, dict) else vars(moved)
            lines.append(f"a {kind} batch: " + ", ".join(f"{k} on {t.device}" for k, t in fields.items()))
        return lines


class TwoGPUToyModel(torch.nn.Module):
    """ToyModel's layers spread over two GPUs: ``net1`` on cuda:0, ``net2`` on cuda:1. Its forward moves
    the activation from the first GPU to the second, as a model spread over devices must."""

    def __init__(self) -> None:
        super().__init__()
        self.net1, self.relu, self.net2 = torch.nn.Linear(10, 10), torch.nn.ReLU(), torch.nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)).to("cuda:1"))


def forward_on_two_fake_gpus(move_input_to: str | None = None) -> str:
    """The classic example's forward on ``TwoGPUToyModel``, with fake tensors. Such a model takes
    ``device_ids=None``, so DDP moves nothing: the input arrives as you pass it.

    Args:
        move_input_to: a device to move the CPU input to first (None: leave it on the CPU).
    Returns where the input arrived and where the output is, or torch's error as "RuntimeError: message".
    """
    shapes_only = TwoGPUToyModel().to("meta")
    with FakeTensorMode(allow_non_fake_inputs=True):
        shapes_only.net1.to_empty(device="cuda:0")
        shapes_only.net2.to_empty(device="cuda:1")
        shapes_only.requires_grad_(False)
        inputs = torch.randn(20, 10)
        if move_input_to is not None:
            inputs = inputs.to(move_input_to)
        return _forward_report(shapes_only, inputs)
