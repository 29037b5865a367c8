"""Lesson 04 workers: what DDP does to parameters and gradients, checked with numbers.

Every worker builds a small MLP and a batch that depends only on (seed, step), so one process
with the whole global batch (:func:`single_process_run`) can replay exactly what N ranks did.
"""

from __future__ import annotations

import copy
import time
from contextlib import nullcontext
from typing import Literal
from unittest import mock

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.profiler import ProfilerActivity, profile

# The MLP, its batches and the flat views are shared with buckets.py: they live in shared.py.
try:  # inside the ddp_lib package
    from ddp_lib.process_group import process_group, wrap_ddp
    from ddp_lib.workers.shared import (
        LR,
        flat_grads,
        flat_params,
        gather_flat,
        global_batch,
        make_mlp,
        param_checksum,
        rank_batch,
    )
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import process_group, wrap_ddp
    from shared import LR, flat_grads, flat_params, gather_flat, global_batch, make_mlp, param_checksum, rank_batch


def broadcast_at_construction(rank: int, world_size: int, seed: int = 0) -> dict:
    """Start each rank with different weights (seed + rank); return checksums before and after DDP().

    Args:
        seed: base seed; rank r uses seed + r.
    """
    with process_group(rank, world_size) as device:
        model = make_mlp(seed + rank).to(device)
        before = param_checksum(model)
        wrap_ddp(model, device)  # rank 0's parameters and buffers are broadcast here
        return {"before": before, "after": param_checksum(model)}


def buffers_at_forward(rank: int, world_size: int) -> dict:
    """Wrap ``Linear(4, 4)`` then ``BatchNorm1d(4)`` in DDP, then set the batch norm's running mean to
    this rank's number, so the ranks' buffers differ. Run one forward with gradients on, on this rank's
    own batch. Returns the running mean's first entry before the forward, as the layers' forward starts
    (recorded by a forward pre-hook), and after the forward."""
    with process_group(rank, world_size) as device:
        torch.manual_seed(rank)  # each rank its own batch
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).to(device)
        ddp_model = wrap_ddp(model, device)
        running_mean = model[1].running_mean
        with torch.no_grad():
            running_mean.fill_(float(rank))  # the ranks' buffers now differ
        seen = []
        model.register_forward_pre_hook(lambda _module, _args: seen.append(running_mean[0].item()))
        before = running_mean[0].item()
        ddp_model(torch.randn(8, 4, device=device)).sum().backward()
        return {"before": before, "at_start": seen[0], "after": running_mean[0].item()}


def grads_after_backward(rank: int, world_size: int, seed: int = 0, per_rank_batch: int = 4) -> dict:
    """One backward on this rank's data. Returns the gradient this rank would have alone
    (a plain copy of the model), the .grad DDP leaves, and whether all ranks hold the same .grad.

    Args:
        seed: seed of the model and data.
        per_rank_batch: batch per rank.
    """
    with process_group(rank, world_size) as device:  # init_process_group ... destroy_process_group
        ddp_model = wrap_ddp(make_mlp(seed).to(device), device)  # DDP(model) on a CPU
        alone = copy.deepcopy(ddp_model.module)  # same weights, no DDP: what this rank computes by itself
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, seed))
        nn.functional.mse_loss(alone(x), y).backward()
        nn.functional.mse_loss(ddp_model(x), y).backward()  # the all-reduce happens inside this call
        local, synced = flat_grads(alone).to(device), flat_grads(ddp_model)
        mean_of_local = sum(gather_flat(local)) / world_size  # all_gather of one flat tensor
        everyone = gather_flat(synced.to(device))
        return {
            "local_grad_sum": round(local.sum().item(), 6),
            "ddp_grad_sum": round(synced.sum().item(), 6),
            "all_ranks_equal": all(torch.equal(everyone[0], g) for g in everyone),
            "equals_mean_of_local": torch.allclose(synced, mean_of_local, rtol=0, atol=1e-7),
        }


def reducer_scaling(rank: int, world_size: int, seed: int = 0, n: int = 4096) -> dict:
    """Give every rank the same gradient ``g`` (n float32 values) and let DDP's backward average it,
    with no communication hook (the reducer's built-in all-reduce), with torch's Python
    ``allreduce_hook``, with ``gradient_as_bucket_view=True`` once ``.grad`` already is a view
    into its bucket (a first backward, then ``.grad`` zeroed in place), and with ``batched_grad_copy=True``
    (a bucket's gradients copied in one go). Returns n, on how many entries
    ``g * (1 / world_size)`` and ``g / world_size`` differ in float32, and, for each way, which of the
    two summed over the ranks DDP's .grad equals bit for bit ("multiplied", "divided" or "neither").

    Args:
        seed: seed of ``g``.
        n: number of gradient entries.
    """
    with process_group(rank, world_size) as device:
        g = torch.randn(1, n, generator=torch.Generator().manual_seed(seed))  # the same on every rank
        multiplied = g * torch.tensor(1 / world_size, dtype=torch.float32)  # 1/world_size rounded to float32
        divided = g / world_size
        # world_size equal terms: on 2 or 3 ranks the order of the all-reduce's additions changes nothing.
        sums = {name: sum([t] * world_size, torch.zeros_like(t)) for name, t in
                (("multiplied", multiplied), ("divided", divided))}
        result = {"n": n, "entries_that_differ": int((multiplied != divided).sum())}
        for way in ("built_in", "allreduce_hook", "bucket_view", "batched_copy"):
            layer = nn.Linear(n, 1, bias=False)  # the gradient of its weight for input g is exactly g
            ddp_model = wrap_ddp(layer.to(device), device, gradient_as_bucket_view=way == "bucket_view",
                                 batched_grad_copy=way == "batched_copy")
            if way == "allreduce_hook":
                ddp_model.register_comm_hook(None, default_hooks.allreduce_hook)
            if way == "bucket_view":  # a first backward makes .grad a view into the bucket; zero it in place
                ddp_model(g.to(device)).sum().backward()
                layer.weight.grad.zero_()
            ddp_model(g.to(device)).sum().backward()
            grad = layer.weight.grad.cpu()
            result[way] = next((name for name, s in sums.items() if torch.equal(grad, s)), "neither")
        return result


def ddp_run(rank: int, world_size: int, per_rank_batch: int = 4, steps: int = 5, seed: int = 0,
            reduction: Literal["mean", "sum"] = "mean", lr: float = LR) -> dict:
    """DDP training on per-rank batches; ranks start from different weights (seed + rank).

    Args:
        per_rank_batch: batch per rank.
        steps: SGD steps.
        seed: seed of the model and data.
        reduction: "mean" or "sum" loss.
        lr: SGD learning rate.
    """
    with process_group(rank, world_size) as device:
        ddp_model = wrap_ddp(make_mlp(seed + rank).to(device), device)
        return _train(ddp_model, lambda step: rank_batch(step, rank, world_size, per_rank_batch, seed),
                      steps, reduction, device, lr)


def _token_batch(rank: int, n_tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s ``n_tokens`` tokens: inputs of 4 features and one target each."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randn(n_tokens, 4, generator=g), torch.randn(n_tokens, 1, generator=g)


def uneven_tokens(rank: int, world_size: int, tokens: tuple[int, ...] = (3, 12), seed: int = 0) -> dict:
    """Rank r holds ``tokens[r]`` tokens and a per-token loss. One backward through DDP with each rank's
    mean over its own tokens ("mean"), and one with each rank's summed loss divided by the all-reduced
    token count, times ``world_size`` ("fixed"). Returns the .grad each leaves, flattened.

    Args:
        tokens: the number of tokens on each rank, one entry per rank at least.
        seed: seed of the model and data.
    """
    if len(tokens) < world_size:
        raise ValueError(f"tokens: {len(tokens)} entries for {world_size} ranks; give one per rank")
    with process_group(rank, world_size) as device:
        x, y = (t.to(device) for t in _token_batch(rank, tokens[rank], seed))
        grads = {}
        for way in ("mean", "fixed"):
            torch.manual_seed(seed)
            ddp_model = wrap_ddp(nn.Linear(4, 1).to(device), device)
            per_token = nn.functional.mse_loss(ddp_model(x), y, reduction="none")
            if way == "mean":
                loss = per_token.mean()  # a mean over this rank's tokens only
            else:
                n_tokens = torch.tensor(float(per_token.numel()), device=device)
                dist.all_reduce(n_tokens)  # every rank's count, summed: the tokens of the whole step
                loss = per_token.sum() / n_tokens * world_size  # x world_size: DDP divides by it
            loss.backward()
            grads[way] = flat_grads(ddp_model).cpu()
        return grads


def uneven_tokens_one_process(tokens: tuple[int, ...] = (3, 12), seed: int = 0) -> torch.Tensor:
    """:func:`uneven_tokens`'s reference: the gradient of one process's mean loss over every rank's
    tokens together, flattened."""
    x, y = (torch.cat(parts) for parts in zip(*(_token_batch(r, n, seed) for r, n in enumerate(tokens))))
    torch.manual_seed(seed)
    model = nn.Linear(4, 1)
    nn.functional.mse_loss(model(x), y).backward()
    return flat_grads(model)


def no_sync_run(rank: int, world_size: int, per_rank_batch: int = 4, grad_accum_steps: int = 2,
                steps: int = 3, seed: int = 0, forward_inside_no_sync: bool = True) -> dict:
    """Gradient accumulation: each rank splits its batch into ``grad_accum_steps`` micro-batches and
    skips the all-reduce (no_sync) on all but the last. Returns final parameters and the number of
    all-reduces per micro-batch of the first step.

    Args:
        per_rank_batch: batch per rank per step, split into grad_accum_steps micro-batches.
        grad_accum_steps: micro-batches per step.
        steps: SGD steps.
        seed: seed of the model and data.
        forward_inside_no_sync: False runs each forward before entering no_sync(), the mistake
            torch's docstring of no_sync warns about: the backward then synchronises anyway.
    """
    with process_group(rank, world_size) as device:
        ddp_model = wrap_ddp(make_mlp(seed).to(device), device)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR)
        micro = per_rank_batch // grad_accum_steps
        allreduces_per_micro_batch = []
        for step in range(steps):
            optimizer.zero_grad()
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, per_rank_batch, seed))
            for i in range(grad_accum_steps):
                rows = slice(i * micro, (i + 1) * micro)
                last = i == grad_accum_steps - 1
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    if forward_inside_no_sync:
                        # Inside no_sync, backward only accumulates into .grad; the next synced
                        # backward all-reduces the accumulated sum.
                        skip_sync = nullcontext() if last else ddp_model.no_sync()
                        with skip_sync:  # the forward and the backward
                            loss = nn.functional.mse_loss(ddp_model(x[rows]), y[rows]) / grad_accum_steps
                            loss.backward()
                    else:  # the mistake: the forward runs before no_sync()
                        loss = nn.functional.mse_loss(ddp_model(x[rows]), y[rows]) / grad_accum_steps
                        with nullcontext() if last else ddp_model.no_sync():
                            loss.backward()  # all-reduces even inside no_sync()
                if step == 0:
                    allreduces_per_micro_batch.append(c10d_ops(prof).get("allreduce_", 0))
            optimizer.step()
        return {"params": flat_params(ddp_model), "allreduces_per_micro_batch": allreduces_per_micro_batch}


def epoch_end_accumulation(rank: int, world_size: int, micro_batches: int = 5, grad_accum_steps: int = 2,
                           last_group: Literal["step_once_more", "synced"] = "synced",
                           per_rank_batch: int = 2, seed: int = 0) -> dict:
    """One epoch of gradient accumulation whose micro-batch count is not a multiple of
    ``grad_accum_steps``. Returns this rank's final parameters, and those of one process
    without DDP that steps once per group of grad_accum_steps global batches (fewer in the last
    group).

    Args:
        micro_batches: micro-batches in the epoch, per rank.
        grad_accum_steps: micro-batches per optimizer step.
        last_group: "step_once_more" syncs every grad_accum_steps-th micro-batch and divides each
            loss by grad_accum_steps, then steps once more after the loop: the leftover micro-batches
            ran inside no_sync(), so that step uses this rank's own gradient. "synced" also syncs the
            epoch's last micro-batch and divides each loss by its group's real size.
        per_rank_batch: rows per micro-batch per rank.
        seed: seed of the model and data.
    """
    n = micro_batches
    with process_group(rank, world_size) as device:
        ddp_model = wrap_ddp(make_mlp(seed).to(device), device)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR)
        for i in range(n):
            x, y = (t.to(device) for t in rank_batch(i, rank, world_size, per_rank_batch, seed))
            if last_group == "synced":
                last = (i + 1) % grad_accum_steps == 0 or i == n - 1
                start = i - i % grad_accum_steps  # the first micro-batch of this step
                in_step = min(grad_accum_steps, n - start)  # fewer at the epoch's end
            else:
                last, in_step = (i + 1) % grad_accum_steps == 0, grad_accum_steps
            with nullcontext() if last else ddp_model.no_sync():
                loss = nn.functional.mse_loss(ddp_model(x), y) / in_step
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
        if last_group == "step_once_more" and n % grad_accum_steps:
            optimizer.step()  # on gradients that were never all-reduced
            optimizer.zero_grad()
    one = make_mlp(seed)  # the reference: one process, the global batches, no DDP
    one_optimizer = torch.optim.SGD(one.parameters(), lr=LR)
    for first in range(0, n, grad_accum_steps):
        group = range(first, min(first + grad_accum_steps, n))
        for i in group:
            x, y = global_batch(i, world_size * per_rank_batch, seed)
            (nn.functional.mse_loss(one(x), y) / len(group)).backward()
        one_optimizer.step()
        one_optimizer.zero_grad()
    return {"params": flat_params(ddp_model), "one_process": flat_params(one)}


def unused_parameters(rank: int, world_size: int, find_unused_parameters: bool = False, steps: int = 3,
                      use_b: bool = False) -> dict:
    """Train TwoHeads, using head b only if ``use_b``. With b unused and no find_unused_parameters
    the second forward raises; otherwise returns b's weight grad and the collectives the steps ran,
    in all and step by step.

    Args:
        find_unused_parameters: turn on DDP's unused parameter detection.
        steps: training steps.
        use_b: use head b in forward (then nothing is unused).
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(0)
        ddp_model = wrap_ddp(TwoHeads().to(device), device, find_unused_parameters=find_unused_parameters)
        x, y = torch.randn(4, 8, device=device), torch.randn(4, 4, device=device)
        per_step = []
        for _ in range(steps):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                nn.functional.mse_loss(ddp_model(x, use_b), y).backward()
            per_step.append(c10d_ops(prof))
        collectives = {name: sum(step.get(name, 0) for step in per_step) for name in sorted(set().union(*per_step))}
        return {"b_weight_grad": ddp_model.module.b.weight.grad, "steps": steps, "collectives": collectives,
                "collectives_per_step": per_step}


def fp16_compression(rank: int, world_size: int, seed: int = 0, per_rank_batch: int = 4) -> dict:
    """Same weights and data through DDP with the default hook and with fp16_compress_hook.
    Returns the gradients of both and this rank's own gradient before averaging (flat CPU tensors),
    and, for each bucket of the fp16 model, the dtype and bytes of the bucket and of the tensor the
    hook handed to ``dist.all_reduce``.

    Args:
        seed: seed of the model and data.
        per_rank_batch: batch per rank.
    """
    with process_group(rank, world_size) as device:
        plain = wrap_ddp(make_mlp(seed).to(device), device)
        fp16 = wrap_ddp(make_mlp(seed).to(device), device)
        sent: list[dict] = []  # per bucket: the bucket the hook receives, the tensor it all-reduces
        all_reduce = dist.all_reduce

        def recording_all_reduce(tensor, *args, **kwargs):  # dist.all_reduce, noting what it sends
            sent[-1]["all_reduce"] = (str(tensor.dtype), tensor.nbytes)
            return all_reduce(tensor, *args, **kwargs)

        def recording_fp16_hook(state, bucket):  # fp16_compress_hook, noting the bucket it receives
            sent.append({"bucket": (str(bucket.buffer().dtype), bucket.buffer().nbytes)})
            return default_hooks.fp16_compress_hook(state, bucket)

        # Each bucket is cast to float16 before the all-reduce (half the bytes) and back after.
        fp16.register_comm_hook(None, recording_fp16_hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, seed))
        alone = copy.deepcopy(plain.module)  # same weights, no DDP: this rank's own gradient
        nn.functional.mse_loss(alone(x), y).backward()
        nn.functional.mse_loss(plain(x), y).backward()
        with mock.patch.object(dist, "all_reduce", recording_all_reduce):  # the hook calls dist.all_reduce
            nn.functional.mse_loss(fp16(x), y).backward()
        return {"own": flat_grads(alone), "plain": flat_grads(plain), "fp16": flat_grads(fp16), "sent": sent}


def fp16_training(rank: int, world_size: int, steps: int = 20, seed: int = 0, per_rank_batch: int = 4,
                  lr: float = LR) -> dict:
    """Train two DDP copies of one MLP on the same batches, ``steps`` SGD steps each: one as DDP
    sends by default (float32), one with ``fp16_compress_hook``. Returns the training loss of
    each step, averaged over the ranks, for both, and the largest difference of their final
    parameters.

    Args:
        steps: SGD steps.
        seed: seed of the model and data.
        per_rank_batch: batch per rank.
        lr: SGD learning rate.
    """
    with process_group(rank, world_size) as device:
        models = {"float32": wrap_ddp(make_mlp(seed).to(device), device),
                  "float16": wrap_ddp(make_mlp(seed).to(device), device)}
        models["float16"].register_comm_hook(None, default_hooks.fp16_compress_hook)
        losses: dict[str, list[float]] = {name: [] for name in models}
        for name, model in models.items():
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for step in range(steps):
                x, y = (t.to(device) for t in rank_batch(step, rank, world_size, per_rank_batch, seed))
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                mean_loss = loss.detach().clone()
                dist.all_reduce(mean_loss)  # the ranks' mean loss, for printing only
                losses[name].append(mean_loss.item() / world_size)
        param_diff = (flat_params(models["float32"]) - flat_params(models["float16"])).abs().max().item()
        return {"losses": losses, "max_param_diff": param_diff}


def fp16_on_slow_wire(rank: int, world_size: int, ms_per_mib: float = 100.0, repeats: int = 3,
                      per_rank_batch: int = 16) -> dict:
    """Time backward under DDP over a slow wire, whose time grows with the bytes: each all-reduce a
    hook starts first sleeps ``ms_per_mib`` per MiB of its tensor. Two DDP copies of one MLP of seven
    256x256 weights (1.75 MiB of float32 gradients): one with ``allreduce_hook`` (float32, as DDP
    sends without a hook), one with ``fp16_compress_hook``, timed in turn after one untimed pass
    each. Returns each way's backward times and the bytes its all-reduces sent per pass.

    Args:
        ms_per_mib: the wire's time per MiB sent.
        repeats: timed passes of each way.
        per_rank_batch: batch per rank (small: computing should be a small part of backward).
    """
    widths = (256,) * 8
    with process_group(rank, world_size) as device:
        hooks = {"float32": default_hooks.allreduce_hook, "float16": default_hooks.fp16_compress_hook}
        models = {}
        for name, hook in hooks.items():
            models[name] = wrap_ddp(make_mlp(0, widths).to(device), device)
            models[name].register_comm_hook(None, hook)
        x, y = (t.to(device) for t in rank_batch(0, rank, world_size, per_rank_batch, widths=widths))
        all_reduce = dist.all_reduce
        sent = [0]

        def slow_all_reduce(tensor, *args, **kwargs):  # the wire: a wait that grows with the bytes
            sent[0] += tensor.nbytes
            time.sleep(tensor.nbytes / 2**20 * ms_per_mib / 1000)
            return all_reduce(tensor, *args, **kwargs)

        times: dict[str, list[float]] = {name: [] for name in models}
        sent_bytes: dict[str, int] = {}
        with mock.patch.object(dist, "all_reduce", slow_all_reduce):  # both hooks call dist.all_reduce
            for i in range(1 + repeats):  # the first pass of each way is not timed
                for name, model in models.items():
                    model.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    dist.barrier()
                    sent[0] = 0
                    start = time.perf_counter()
                    loss.backward()  # returns once every bucket's all-reduce is done
                    if i > 0:
                        times[name].append(round(1000 * (time.perf_counter() - start), 1))
                    sent_bytes[name] = sent[0]
        return {"ms": times, "sent_bytes": sent_bytes, "ms_per_mib": ms_per_mib}


def fp16_tiny_gradients(rank: int, world_size: int, steps_of_2_24: tuple[float, ...] = (1, 2, 3, 4)) -> dict:
    """Every rank gets the same gradient g, values given in steps of 2**-24 (float16's smallest
    subnormal), and DDP averages it through fp16_compress_hook, which casts to float16 and then
    divides by world_size in float16. Returns the values and what the averaged .grad holds, both in
    steps of 2**-24 (without the hook, the mean of equal values is the value itself)."""
    step = 2.0 ** -24
    with process_group(rank, world_size) as device:
        g = torch.tensor([steps_of_2_24], dtype=torch.float32) * step  # exact in float32
        layer = nn.Linear(g.numel(), 1, bias=False)  # the gradient of its weight for input g is exactly g
        ddp_model = wrap_ddp(layer.to(device), device)
        ddp_model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        ddp_model(g.to(device)).sum().backward()
        return {"sent": list(steps_of_2_24), "averaged": [v / step for v in layer.weight.grad.cpu()[0].tolist()]}


# ---- helpers


def _train(model: nn.Module, batches, steps: int, reduction: str, device: torch.device, lr: float) -> dict:
    """SGD for ``steps`` steps on batches(step) = (x, y). Returns the first step's gradients and
    the final parameters."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    first_grads = None
    for step in range(steps):
        optimizer.zero_grad()
        x, y = batches(step)
        nn.functional.mse_loss(model(x.to(device)), y.to(device), reduction=reduction).backward()
        if first_grads is None:
            first_grads = flat_grads(model)
        optimizer.step()
    return {"first_grads": first_grads, "params": flat_params(model)}


def single_process_run(global_batch_size: int, steps: int = 5, seed: int = 0, reduction: str = "mean",
                       lr: float = LR) -> dict:
    """One process, no DDP, batch ``global_batch_size``: the reference the ranks must match."""
    return _train(make_mlp(seed), lambda step: global_batch(step, global_batch_size, seed), steps,
                  reduction, torch.device("cpu"), lr)


def c10d_ops(prof: profile) -> dict[str, int]:
    """The c10d operators (collectives) torch's profiler recorded, DDP reducer's own included: {name: count}."""
    return dict(sorted((e.key.removeprefix("c10d::"), e.count) for e in prof.key_averages()
                       if e.key.startswith("c10d::")))


class TwoHeads(nn.Module):
    """A trunk and two heads; forward uses head ``b`` only when asked, so ``b`` can go unused."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(8, 8)
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor, use_b: bool = False) -> torch.Tensor:
        h = torch.tanh(self.trunk(x))
        return self.a(h) + self.b(h) if use_b else self.a(h)
