"""Lesson 10's two per-parameter costs behind the 7B table, measured in one process on the CPU: the
temporary that Adam's foreach step makes, and the bfloat16 weight copies that autograd saves under
autocast."""

import torch
from torch import nn
from torch.overrides import TorchFunctionMode


class NewTensorBytes(TorchFunctionMode):
    """Adds up the bytes of the tensors that torch functions return while it is active, leaving out
    the functions that update tensors in place (their names end in "_")."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not getattr(func, "__name__", "").endswith("_"):
            outs = out if isinstance(out, (list, tuple)) else [out]
            self.bytes += sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor))
        return out


def make_model(width: int = 256, layers: int = 3) -> nn.Sequential:
    """``layers`` Linear(width, width) layers with a ReLU between each two."""
    blocks = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*blocks[:-1])


def per_parameter_costs(width: int = 256, layers: int = 3, batch: int = 8) -> dict:
    """Returns {"adam_step": bytes per parameter of the tensors a second ``Adam(foreach=True)`` step
    makes, beside the state it updates in place; "saved_copies": bytes per weight parameter of the
    bfloat16 weights that autograd saves under CPU autocast, counted over every layer but the first;
    "first_layer_saved": whether the first layer's bfloat16 weight was saved (its input needs no
    gradient, so backward does not need it)}."""
    if width < 1 or layers < 2:
        raise ValueError(f"width must be at least 1 and layers at least 2, got width={width!r}, layers={layers!r}")
    torch.manual_seed(0)
    model = make_model(width, layers)
    weights = [m.weight for m in model if isinstance(m, nn.Linear)]
    adam = torch.optim.Adam(model.parameters(), foreach=True)  # the foreach path: CUDA's default, not the CPU's
    model(torch.ones(batch, width)).sum().backward()
    adam.step()  # the first step makes Adam's state
    with NewTensorBytes() as new:
        adam.step()
    saved = []
    with torch.autocast("cpu", dtype=torch.bfloat16), \
            torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        model(torch.ones(batch, width))
    copies = [t for t in saved if t.dtype == torch.bfloat16 and t.shape == (width, width)]
    return {"adam_step": round(new.bytes / sum(p.numel() for p in model.parameters()), 2),
            "saved_copies": round(sum(t.numel() * t.element_size() for t in copies)
                                  / sum(w.numel() for w in weights[1:]), 2),
            "first_layer_saved": len(copies) == len(weights)}


def per_parameter_costs_in_a_rank(rank: int, world_size: int, **sizes) -> dict:
    """``per_parameter_costs(**sizes)`` as a worker: lesson 10 runs it in its 4-rank job, whose ranks
    have already imported what an optimizer needs, so that the lesson's own process need not."""
    return per_parameter_costs(**sizes)
