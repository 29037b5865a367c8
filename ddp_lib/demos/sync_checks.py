"""Lesson 04's counts on a one-process group (gloo, in-memory store), run in the notebook's own
process: which forwards of a model with a buffer start with DDP's buffer broadcast, and how many
gradient all-reduces a backward runs after a forward through ``ddp_model`` and after one through
``ddp_model.module``; which parameters each bucket holds, in the order the buckets are sent; that
parameters of two dtypes go to separate buckets; which communication hooks DDP refuses; that frozen
parameters are broadcast but not shape-checked; and which forwards detect an unused parameter."""

from __future__ import annotations

import contextlib
from unittest import mock

import torch

# DDP() imports torch._dynamo when first built in a process (about 1 s). Imported here, it costs that in a
# notebook's setup cell, while the forkserver the cell started imports torch too, not in the first demo below.
import torch._dynamo  # noqa: F401
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lib.process_group import teardown


@contextlib.contextmanager
def one_process_group():
    """A group of one process (rank 0 of 1) whose store lives in this process's memory."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        teardown()  # not destroy_process_group alone: the pause there avoids gloo's shutdown deadlock


def _buffer_broadcasts(run) -> int:
    """How many times ``run()`` calls the function DDP broadcasts its buffers with (one call sends
    them all; DDP's bucket rebuild, which also broadcasts, does not go through it)."""
    with mock.patch.object(dist, "_broadcast_coalesced", wraps=dist._broadcast_coalesced) as spy:
        run()
    return spy.call_count


CONSTRUCTIONS = {"DDP(model)": {}, "init_sync=False": {"init_sync": False},
                 "broadcast_buffers=False": {"broadcast_buffers": False},
                 "forward_sync_buffers=False": {"forward_sync_buffers": False}}


def construction_syncs() -> dict[str, dict]:
    """Build DDP around ``Linear(4, 4)`` then ``BatchNorm1d(4)`` (4 parameters, 3 buffers) once per
    entry of ``CONSTRUCTIONS``. For each: whether the shape check ran, how many parameters and buffers
    the construction broadcast sent, and the categories of the warnings it gave."""
    import warnings

    import torch.nn.parallel.distributed as ddp_module

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    params = {p.data_ptr() for p in model.parameters()}
    results = {}
    with one_process_group():
        for name, kwargs in CONSTRUCTIONS.items():
            check = mock.patch.object(ddp_module, "_verify_param_shape_across_processes",
                                      wraps=ddp_module._verify_param_shape_across_processes)
            send = mock.patch.object(dist, "_broadcast_coalesced", wraps=dist._broadcast_coalesced)
            with check as checked, send as sent, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                DDP(model, **kwargs)
            tensors = [t for call in sent.call_args_list for t in call.args[1]]
            results[name] = {"shape_check": checked.call_count > 0,
                             "parameters_sent": sum(t.data_ptr() in params for t in tensors),
                             "buffers_sent": sum(t.data_ptr() not in params for t in tensors),
                             "warnings": sorted({w.category.__name__ for w in caught})}
    return results


FORWARDS = ("training", "training", "no_grad", "no_grad", "training", "no_sync", "training")


def buffer_broadcasts(kinds: tuple[str, ...] = FORWARDS, forward_sync_buffers: bool = True) -> list[tuple[str, int]]:
    """Wrap ``Linear(4, 4)`` then ``BatchNorm1d(4)`` (three buffers: running mean, running variance and
    ``num_batches_tracked``) in DDP and run one forward per entry of ``kinds``: "training" (gradients on, then
    backward),
    "no_grad" (under ``torch.no_grad()``), "no_sync" (forward and backward inside ``no_sync()``),
    "eval_mode" (after ``ddp_model.eval()``, gradients on, then backward; ``train()`` again after).
    ``forward_sync_buffers`` is passed to ``DDP``. Returns ``(kind, buffer broadcasts during that forward)``
    for each."""
    if unknown := set(kinds) - {"training", "no_grad", "no_sync", "eval_mode"}:
        raise ValueError(f"kinds: {sorted(unknown)} unknown; accepted: training, no_grad, no_sync, eval_mode")
    torch.manual_seed(0)
    x = torch.randn(8, 4)
    with one_process_group():
        ddp_model = DDP(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), forward_sync_buffers=forward_sync_buffers)
        counts = []
        for kind in kinds:
            ddp_model.train(kind != "eval_mode")
            grad_mode = torch.no_grad() if kind == "no_grad" else contextlib.nullcontext()
            sync_mode = ddp_model.no_sync() if kind == "no_sync" else contextlib.nullcontext()
            with grad_mode, sync_mode:
                outputs = []
                counts.append((kind, _buffer_broadcasts(lambda outputs=outputs: outputs.append(ddp_model(x)))))
                if kind != "no_grad":
                    outputs[0].sum().backward()
        ddp_model.train()
        return counts


def hook_refusals() -> dict[str, str]:
    """What DDP says, on this one-process gloo group, to a second communication hook on one model and to
    ``bf16_compress_hook`` (DDP checks that hook against the build of torch, not the group's backend):
    for each, "ExceptionType: first line of the message", or "accepted"."""
    def first_line(e: Exception) -> str:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"

    results = {}
    with one_process_group():
        ddp_model = DDP(nn.Linear(4, 4))
        ddp_model.register_comm_hook(state=None, hook=default_hooks.allreduce_hook)
        try:
            ddp_model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
            results["a second hook"] = "accepted"
        except RuntimeError as e:
            results["a second hook"] = first_line(e)
        try:
            DDP(nn.Linear(4, 4)).register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
            results["bf16_compress_hook on this build of torch"] = "accepted"
        except (RuntimeError, TypeError) as e:
            results["bf16_compress_hook on this build of torch"] = first_line(e)
    return results


def allreduces_per_backward(steps: int = 2) -> dict[str, list[int]]:
    """Count DDP's gradient all-reduces (calls of its communication hook) in each of ``steps``
    backward passes, first after forwards through ``ddp_model``, then through ``ddp_model.module``."""
    calls = [0]

    def counting_allreduce(state, bucket):
        calls[0] += 1
        return default_hooks.allreduce_hook(state, bucket)

    torch.manual_seed(0)
    x = torch.randn(8, 4)
    with one_process_group():
        ddp_model = DDP(nn.Linear(4, 1))
        ddp_model.register_comm_hook(state=None, hook=counting_allreduce)
        counts = {}
        for name, forward in (("ddp_model(x)", ddp_model), ("ddp_model.module(x)", ddp_model.module)):
            counts[name] = []
            for _ in range(steps):
                calls[0] = 0
                forward(x).sum().backward()
                counts[name].append(calls[0])
        return counts


def outside_the_averaging() -> dict[str, dict]:
    """Three ways around DDP's averaging, each on a fresh ``DDP(nn.Linear(4, 1))``: gradients taken with
    ``torch.autograd.grad``, a parameter added to the module after ``DDP(...)``, and the weight replaced
    after ``DDP(...)``. For each: the all-reduces of that backward, whether the gradient of the parameter
    in question (the weight for ``autograd.grad``) went out in a bucket, and what the next forward does."""
    sent: list[set[int]] = []

    def recording_allreduce(state, bucket):
        sent.append({id(p) for p in bucket.parameters()})
        return default_hooks.allreduce_hook(state, bucket)

    def first_sentence(e: Exception) -> str:
        return f"{type(e).__name__}: {str(e).split('. ')[0]}"

    torch.manual_seed(0)
    x = torch.randn(8, 4)
    results = {}
    with one_process_group():
        for case in ("torch.autograd.grad", "a parameter added after DDP()", "the weight replaced after DDP()"):
            ddp_model = DDP(nn.Linear(4, 1))
            ddp_model.register_comm_hook(state=None, hook=recording_allreduce)
            sent.clear()
            watched = ddp_model.module.weight
            if case == "torch.autograd.grad":
                torch.autograd.grad(ddp_model(x).sum(), list(ddp_model.parameters()))
            elif case == "a parameter added after DDP()":
                ddp_model.module.scale = watched = nn.Parameter(torch.ones(1))
                (ddp_model(x).sum() * ddp_model.module.scale).backward()
            else:
                ddp_model.module.weight = watched = nn.Parameter(torch.ones(1, 4))
                ddp_model(x).sum().backward()
            result = {"allreduces": len(sent), "averaged": any(id(watched) in ids for ids in sent)}
            try:
                ddp_model(x)
                result["next_forward"] = "runs"
            except RuntimeError as e:
                result["next_forward"] = first_sentence(e)
            results[case] = result
    return results


def bucket_layouts(layers: int = 4, width: int = 256, bucket_cap_mb: float = 0.3,
                   steps: int = 2, model: nn.Module | None = None) -> list[list[list[str]]]:
    """Wrap ``layers`` layers ``Linear(width, width)`` (or ``model``, whose input has ``width``
    features) in DDP with ``bucket_cap_mb`` and run ``steps`` forward and backward passes. Returns,
    per step, the buckets in the order their all-reduces started, each as the names of its
    parameters ("0.weight" is the first layer's weight)."""
    names: dict[int, str] = {}
    sent: list[list[str]] = []

    def recording_allreduce(state, bucket):
        sent.append(sorted(names[id(p)] for p in bucket.parameters()))
        return default_hooks.allreduce_hook(state, bucket)

    torch.manual_seed(0)
    x = torch.randn(8, width)
    with one_process_group():
        if model is None:
            model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
        names.update({id(p): name for name, p in model.named_parameters()})
        ddp_model = DDP(model, bucket_cap_mb=bucket_cap_mb)
        ddp_model.register_comm_hook(state=None, hook=recording_allreduce)
        layouts = []
        for _ in range(steps):
            sent.clear()
            ddp_model(x).sum().backward()
            layouts.append([list(bucket) for bucket in sent])
        return layouts


class _TwoDtypesAndSparse(nn.Module):
    """A sparse embedding ``e``, then a float32 layer ``a``, then a float64 layer ``b``."""

    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(8, 4, sparse=True)  # its gradient is a sparse tensor
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4).double()

    def forward(self, x):
        return self.b(self.a(x + self.e(torch.arange(len(x)))).double())


def bucket_dtypes() -> list[tuple[str, str, list[str]]]:
    """Wrap a model with a sparse embedding, a float32 layer and a float64 layer in DDP (default
    bucket cap) and run one backward. Returns the buckets in the order their all-reduces started,
    each as its dtype, "sparse" or "dense", and the names of its parameters."""
    names: dict[int, str] = {}
    sent: list[tuple[str, str, list[str]]] = []

    def recording_allreduce(state, bucket):
        buffer = bucket.buffer()
        sent.append((str(buffer.dtype), "sparse" if buffer.is_sparse else "dense",
                     sorted(names[id(p)] for p in bucket.parameters())))
        return default_hooks.allreduce_hook(state, bucket)

    torch.manual_seed(0)
    with one_process_group():
        model = _TwoDtypesAndSparse()
        names.update({id(p): name for name, p in model.named_parameters()})
        ddp_model = DDP(model)
        ddp_model.register_comm_hook(state=None, hook=recording_allreduce)
        ddp_model(torch.randn(8, 4)).sum().backward()
        return list(sent)


def frozen_parameters() -> dict[str, int]:
    """Build DDP around ``Linear(4, 4)`` with ``requires_grad=False`` then a trainable ``Linear(4, 4)``
    (4 parameters, 2 of them frozen). Returns how many parameters the model has, how many the
    construction broadcast sent, and how many the shape check received."""
    import torch.nn.parallel.distributed as ddp_module

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[0].requires_grad_(False)
    params = {p.data_ptr() for p in model.parameters()}
    with one_process_group():
        check = mock.patch.object(ddp_module, "_verify_param_shape_across_processes",
                                  wraps=ddp_module._verify_param_shape_across_processes)
        send = mock.patch.object(dist, "_broadcast_coalesced", wraps=dist._broadcast_coalesced)
        with check as checked, send as sent:
            DDP(model)
    return {"parameters": len(params),
            "frozen": sum(not p.requires_grad for p in model.parameters()),
            "broadcast at construction": sum(t.data_ptr() in params
                                             for call in sent.call_args_list for t in call.args[1]),
            "shape-checked": sum(len(call.args[1]) for call in checked.call_args_list)}


NEXT_FORWARDS = ("training", "no_sync", "eval_mode", "no_grad")


def unused_parameter_detection(kinds: tuple[str, ...] = NEXT_FORWARDS) -> list[tuple[str, str]]:
    """For each entry of ``kinds``, a fresh ``DDP(TwoHeads())`` (without ``find_unused_parameters``)
    runs one step that leaves head ``b`` unused, then one more forward of that kind: "training"
    (gradients on), "no_sync" (inside ``no_sync()``), "eval_mode" (after ``ddp_model.eval()``),
    "no_grad" (under ``torch.no_grad()``). Returns ``(kind, "raises" or "runs")`` for each."""
    from ddp_lib.workers.gradients import TwoHeads

    if unknown := set(kinds) - set(NEXT_FORWARDS):
        raise ValueError(f"kinds: {sorted(unknown)} unknown; accepted: {', '.join(NEXT_FORWARDS)}")
    torch.manual_seed(0)
    x = torch.randn(8, 8)
    results = []
    with one_process_group():
        for kind in kinds:
            ddp_model = DDP(TwoHeads())
            ddp_model(x).sum().backward()  # head b gets no gradient
            ddp_model.train(kind != "eval_mode")
            grad_mode = torch.no_grad() if kind == "no_grad" else contextlib.nullcontext()
            sync_mode = ddp_model.no_sync() if kind == "no_sync" else contextlib.nullcontext()
            try:
                with grad_mode, sync_mode:
                    ddp_model(x)
                results.append((kind, "runs"))
            except RuntimeError as e:
                if "Expected to have finished reduction" not in str(e):
                    raise
                results.append((kind, "raises"))
    return results
