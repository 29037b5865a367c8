"""Lesson 03: DDP's input move on GPUs that a CPU build can pretend to have.

torch's fake tensors (``FakeTensorMode``) carry a shape and a device but no values, so a CPU build can
make a model "on cuda:0" and run its forward: each operator checks its tensors' devices as on a GPU,
and computes nothing. The input is moved by the function DDP's forward calls with ``device_ids=[i]``
(``_to_kwargs``, with DDP's default side-stream setting), so the move is DDP's own code, not a copy of it.
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.parallel.distributed import _to_kwargs

from ddp_lib.workers.shared import ToyModel


def forward_on_fake_gpu(model_gpu: int, device_ids: list[int] | None, move_input: bool = False) -> str:
    """The classic example's forward on a model placed on ``cuda:<model_gpu>``, with fake tensors.

    Args:
        model_gpu: the GPU index the model's weights are on.
        device_ids: what ``DDP(model, device_ids=...)`` would get; a list of one index moves the input there,
            ``None`` moves nothing, as in DDP's forward.
        move_input: write ``.to(device)`` yourself first, with the model's device.
    Returns one line: where the input arrived and where the output is, or torch's error as "Type: message".
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
        try:
            with torch.no_grad():
                output = model(inputs)
        except RuntimeError as e:
            return f"{type(e).__name__}: {e}"
        return f"input arrived on {inputs.device}, output on {output.device}"
