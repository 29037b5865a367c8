"""Lesson 09: the training loop as it is written today, on lesson 05's job (the same data and model).

    run_ranks(train_loop, 2, kwargs=dict(epochs=4, precision="bf16", max_norm=1.0))
    run_ranks(evaluate_padded, 2, kwargs=dict(n_eval=11, fix="count_real"))
    run_ranks(seeds_and_logging, 2)

``train_loop`` comes first: autocast, a GradScaler, clipping, torch.compile, an exact evaluation and
logging on rank 0. Then the lesson's smaller workers in the lesson's order, then the helpers. The
lesson's measured runs of the same loop (the dtypes sent, gradient norms, step times, the wrong
clipping) are ``ddp_lib/demos/loop_runs.py``.

Copyable: needs only torch, ``process_group`` and ``shared`` (from ddp_lib, or process_group.py and
shared.py beside it).
"""

import logging
import math
import os
import time
from contextlib import nullcontext
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, process_group
    from ddp_lib.workers.shared import make_moons
except ModuleNotFoundError:  # copied into a project next to process_group.py and shared.py
    from process_group import device_ids_for, process_group
    from shared import make_moons

EVAL_SEED = 99  # the held-out set: same generator as the training data, another seed


def train_loop(rank: int, world_size: int, epochs: int = 4, batch_size: int = 16, lr: float = 0.1,
               seed: int = 0, precision: Literal["fp32", "bf16", "fp16"] = "fp32", max_norm: float | None = None,
               compile: bool = False, compile_backend: str = "inductor") -> dict:
    """Lesson 05's training job with the parts a loop has today: autocast, gradient clipping,
    an exact evaluation, torch.compile and logging on rank 0.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        epochs: epochs over the 512 training samples.
        batch_size: samples per rank per step (global batch = world_size x batch_size).
        lr: learning rate of SGD with momentum 0.9.
        seed: seed of the initial weights (the same on every rank) and of the shuffle.
        precision: "fp32", or autocast to "bf16" or "fp16" (fp16 with a GradScaler).
        max_norm: clip the averaged gradient's norm to this (None: no clipping).
        compile: compile the model with torch.compile, then wrap it in DDP.
        compile_backend: torch.compile's backend: "inductor" (generates fused C++ or GPU kernels;
            needs a C++ compiler on a CPU), "aot_eager" (traces forward and backward, runs them op
            by op) or "eager" (runs the graphs dynamo captured as they are).

    Returns {"rank", "losses" (per epoch, mean over all ranks' samples), "accuracy" (held-out,
    exact), "scale" (the GradScaler's final scale, or None), "params" (flattened)}.
    """
    with process_group(rank, world_size) as device:
        log = setup_logging(rank)  # a handler, and INFO on rank 0 only: see setup_logging below
        torch.manual_seed(seed)
        dataset = make_moons()
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
        model = LoopNet().to(device)
        # Compile the module, then wrap it. LoopNet could use model.compile() too; torch.compile(model) is the
        # call that also works for an nn.Sequential in torch 2.13 (pytorch/pytorch#150915), so the lessons use it.
        step_module = torch.compile(model, backend=compile_backend) if compile else model
        ddp_model = DDP(step_module, device_ids=device_ids_for(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        # fp16 has a narrow exponent range: small gradients underflow unless the loss is scaled.
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        loss_fn = nn.CrossEntropyLoss()

        losses = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, samples
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    loss = loss_fn(ddp_model(x), y)
                scaler.scale(loss).backward()  # DDP averages the gradients here
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                if max_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # the averaged gradient, on every rank
                scaler.step(optimizer)  # skips the step if a gradient is inf/nan (fp16 overflow)
                scaler.update()
                totals[0] += loss.detach().double() * len(y)
                totals[1] += len(y)
            dist.all_reduce(totals)
            losses.append(round((totals[0] / totals[1]).item(), 6))
            log.info("epoch %d/%d loss %.4f", epoch + 1, epochs, losses[-1])

        accuracy, _ = evaluate(model, make_moons(101, seed=EVAL_SEED), rank, world_size, device)
        return {"rank": rank, "losses": losses, "accuracy": accuracy,
                "scale": scaler.get_scale() if scaler.is_enabled() else None,
                "params": torch.cat([p.detach().flatten() for p in model.parameters()]).cpu().tolist()}


def evaluate(model: nn.Module, dataset: Dataset, rank: int, world_size: int,
             device: torch.device) -> tuple[float, int]:
    """Accuracy over every sample of ``dataset`` exactly once, summed over all ranks, and how many
    were counted.

    DistributedSampler pads the index list to a multiple of world_size by repeating its first
    indices; rank r reads positions r, r + world_size, ... of the padded list, so a position at or
    past len(dataset) is a duplicate and is not counted.
    """
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # correct, samples
    model.eval()
    with torch.no_grad():
        for i, index in enumerate(sampler):
            if rank + i * world_size >= len(dataset):
                continue  # a padding duplicate
            x, y = dataset[index]
            counts[0] += (model(x.to(device).unsqueeze(0)).argmax(1) == y.to(device)).sum()
            counts[1] += 1
    model.train()
    dist.all_reduce(counts)  # every rank calls it: a collective only some ranks reach hangs
    return (counts[0] / counts[1]).item(), int(counts[1].item())


def scaler_overflow(rank: int, world_size: int, steps: int = 7, overflow_step: int = 2,
                    growth_interval: int = 2, seed: int = 0) -> dict:
    """fp16 autocast with a GradScaler under DDP, where one step on rank 0 alone overflows float16.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        steps: SGD steps on lesson 05's data (16 samples per rank per step).
        overflow_step: the step at which rank 0 multiplies one input by 1e6: its float16 activations
            pass 65504 and become inf (the other ranks' inputs are normal).
        growth_interval: the scaler doubles its scale after this many steps without inf/nan.
        seed: seed of the weights.

    Returns {"rank", "steps": per step {"scale" (used for this step's backward), "finite" (every
    gradient finite after the all-reduce), "stepped" (the parameters changed), "grads" (this rank's
    gradients after the all-reduce, nan/inf written as strings)}}.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        model = LoopNet().to(device)
        ddp_model = DDP(model, device_ids=device_ids_for(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10, growth_interval=growth_interval)
        x_all, y_all = make_moons().tensors
        record = []
        for step in range(steps):
            x = x_all[rank::world_size][16 * step:16 * (step + 1)].clone()
            y = y_all[rank::world_size][16 * step:16 * (step + 1)]
            scale = scaler.get_scale()  # recorded: the scale this step's backward uses
            if step == overflow_step and rank == 0:
                x[0] *= 1e6  # float16's largest value is 65504
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=torch.float16):
                loss = nn.functional.cross_entropy(ddp_model(x.to(device)), y.to(device))
            scaler.scale(loss).backward()  # DDP averages: one rank's inf reaches every rank
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])  # recorded: after the all-reduce
            before = torch.cat([p.detach().flatten() for p in model.parameters()])  # recorded: did step() move them?
            scaler.step(optimizer)  # unscales, then skips the step if a gradient is inf or nan
            scaler.update()  # halves the scale after a skipped step, doubles it after growth_interval good ones
            after = torch.cat([p.detach().flatten() for p in model.parameters()])
            record.append({"scale": scale, "finite": bool(grads.isfinite().all()),
                           "stepped": not torch.equal(before, after),
                           "grads": [v if math.isfinite(v) else str(v) for v in grads.cpu().tolist()]})
        return {"rank": rank, "steps": record}


def accumulate_and_clip(rank: int, world_size: int, steps: int = 3, micro_batches: int = 2, micro_size: int = 8,
                        max_norm: float = 0.5, lr: float = 0.5, seed: int = 0,
                        precision: Literal["fp32", "fp16"] = "fp32") -> dict:
    """Gradient accumulation under DDP done right: each step runs ``micro_batches`` forwards and
    backwards, all but the last inside ``no_sync()``, each loss divided by the number of micro-batches,
    then clips the synchronised gradient and steps. Beside it, one process without DDP steps on each
    step's global batch (every rank's micro-batches at once), from the same weights, in float32.

    ``precision="fp16"`` runs each forward under float16 autocast with a GradScaler: every backward
    is scaled, and ``unscale_``, the clipping, ``step`` and ``update`` come once per step. With "fp32"
    the scaler is disabled, and its calls do nothing more than the plain loop.

    Returns {"rank", "all_reduces" (DDP's, counted by a comm hook), "steps", "skipped" (steps the
    scaler skipped), "max_diff" (largest parameter difference from the one process after the last step)}.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        model = LoopNet().to(device)
        reference = LoopNet().to(device)
        reference.load_state_dict(model.state_dict())
        ddp_model = DDP(model, device_ids=device_ids_for(device))
        counts = {"all_reduces": 0}
        ddp_model.register_comm_hook(counts, counting_allreduce)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
        fp16 = precision == "fp16"
        scaler = torch.amp.GradScaler(device.type, enabled=fp16)  # disabled: each call does nothing extra
        x_all, y_all = (t.to(device) for t in make_moons().tensors)
        per_rank = micro_batches * micro_size
        skipped = 0
        for step in range(steps):
            start = step * per_rank * world_size  # this step's global batch: every rank's part in turn
            x_global, y_global = x_all[start:start + per_rank * world_size], y_all[start:start + per_rank * world_size]
            x_mine = x_global[rank * per_rank:(rank + 1) * per_rank].split(micro_size)
            y_mine = y_global[rank * per_rank:(rank + 1) * per_rank].split(micro_size)

            scale = scaler.get_scale()  # the scale drops only after a skipped step
            optimizer.zero_grad(set_to_none=True)  # once per step, not per micro-batch
            for i, (x, y) in enumerate(zip(x_mine, y_mine)):
                last = i == micro_batches - 1
                # no_sync must cover the forward too: DDP decides there whether backward all-reduces.
                with nullcontext() if last else ddp_model.no_sync():
                    with torch.autocast(device.type, dtype=torch.float16, enabled=fp16):
                        loss = nn.functional.cross_entropy(ddp_model(x), y) / micro_batches
                    scaler.scale(loss).backward()  # adds to .grad; the last backward all-reduces the sum
            scaler.unscale_(optimizer)  # once, after the last backward
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # on the synchronised gradient
            scaler.step(optimizer)  # skips the step if a gradient is inf or nan
            scaler.update()
            skipped += scaler.get_scale() < scale

            reference_optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(reference(x_global), y_global).backward()
            nn.utils.clip_grad_norm_(reference.parameters(), max_norm)
            reference_optimizer.step()
        max_diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))
        return {"rank": rank, "all_reduces": counts["all_reduces"], "steps": steps, "skipped": int(skipped),
                "max_diff": max_diff}


def evaluate_padded(rank: int, world_size: int, n_eval: int = 11,
                    fix: Literal["none", "drop_last", "count_real", "subset"] = "none", seed: int = 0) -> dict:
    """Evaluate one model on ``n_eval`` held-out samples split by DistributedSampler, the naive way
    or with a fix for its padding, and sum the counts over ranks with all_reduce.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        n_eval: number of held-out samples (not a multiple of world_size, to see the padding).
        fix: "none" counts every index the sampler gives (duplicates too), "drop_last" uses
            DistributedSampler(drop_last=True), "count_real" skips the padding positions, "subset" reads
            the indices of ``Subset(dataset, range(rank, len(dataset), world_size))`` instead of the sampler's.
        seed: seed of the model's weights (an untrained model: the point is the counting).

    Returns {"rank", "indices" (this rank's sample indices), "correct", "counted" (summed over
    ranks), "accuracy", "reference" (accuracy of the same model on every sample, computed on this rank alone)}.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        model = LoopNet().to(device).eval()
        dataset = make_moons(n_eval, seed=EVAL_SEED)
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False,
                                     drop_last=fix == "drop_last")
        indices = list(sampler)
        if fix == "subset":  # every world_size-th sample from rank on: no padding to skip
            indices = list(Subset(dataset, range(rank, len(dataset), world_size)).indices)
        counts = torch.zeros(2, dtype=torch.float64, device=device)
        with torch.no_grad():
            x, y = dataset.tensors
            right = (model(x.to(device)).argmax(1) == y.to(device)).cpu()
            for i, index in enumerate(indices):
                if fix == "count_real" and rank + i * world_size >= len(dataset):
                    continue
                counts += torch.tensor([float(right[index]), 1.0], dtype=torch.float64, device=device)
        dist.all_reduce(counts)
        return {"rank": rank, "indices": indices, "correct": int(counts[0]), "counted": int(counts[1]),
                "accuracy": (counts[0] / counts[1]).item(), "reference": right.double().mean().item()}


def batchnorm_drift(rank: int, world_size: int, steps: int = 3, seed: int = 0) -> dict:
    """A model with batch norm trains ``steps`` DDP steps, each rank on its own batches. Then every rank
    evaluates its unwrapped module on the same held-out samples, before and after taking rank 0's buffers.

    Returns {"rank", "before", "after"}: each {"running_mean", "running_var", "logits"} (CPU tensors), so that
    the caller can compare the ranks.
    """
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)  # the same initial weights and buffers on every rank
        model = nn.Sequential(nn.Linear(2, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 2)).to(device)
        ddp_model = DDP(model, device_ids=device_ids_for(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = (t[rank::world_size].to(device) for t in make_moons().tensors)  # this rank's own samples
        for step in range(steps):
            batch = slice(16 * step, 16 * (step + 1))
            optimizer.zero_grad()
            # DDP's forward first copies rank 0's buffers here; batch norm then updates them from this rank's batch.
            nn.functional.cross_entropy(ddp_model(x[batch]), y[batch]).backward()
            optimizer.step()
        held_out = make_moons(101, seed=EVAL_SEED).tensors[0].to(device)  # the same samples on every rank
        seen = {}
        for when in ("before", "after"):
            if when == "after":
                for buffer in model.buffers():  # the fix: every rank takes rank 0's buffers
                    dist.broadcast(buffer, src=0)
            model.eval()  # batch norm normalises with its running statistics
            with torch.no_grad():
                logits = model(held_out)
            model.train()
            norm = model[1]
            seen[when] = {"running_mean": norm.running_mean.cpu().clone(),
                          "running_var": norm.running_var.cpu().clone(), "logits": logits.cpu()}
        return {"rank": rank, **seen}


def rank0_evaluation(rank: int, world_size: int, collective_in_eval: bool = False, timeout_s: float = 3.0,
                     eval_after_step: int = 0, eval_seconds: float = 0.0) -> dict:
    """Rank 0 alone evaluates the model after a training step, the others go on to the next step.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        collective_in_eval: True makes rank 0's evaluation all-reduce its metric, a collective the
            other ranks never call. It pairs with their next collective: after step 0, the first of
            the two broadcasts DDP's second forward makes (once) to agree on its rebuilt buckets;
            after a later step, the next backward's all-reduce of the gradients, of another size.
        timeout_s: the process group's timeout, after which a collective nobody matches fails.
        eval_after_step: the step after which rank 0 evaluates; the loop runs one more step after it.
        eval_seconds: rank 0's evaluation lasts at least this long (it sleeps), as a long one would.

    Returns {"rank", "accuracy" (rank 0 only, else None), "checksum" (of the parameters after the steps)}.
    """
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        torch.manual_seed(0)
        model = LoopNet().to(device)
        ddp_model = DDP(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        dataset = make_moons()
        x, y = (t[rank::world_size][:16].to(device) for t in dataset.tensors)
        accuracy = None
        # With the mismatch, trace this rank's collectives, to name them when one fails.
        tracing = profile(activities=[ProfilerActivity.CPU]) if collective_in_eval else nullcontext()
        try:
            with tracing:
                for step in range(eval_after_step + 2):
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(ddp_model(x), y).backward()
                    optimizer.step()
                    if step == eval_after_step and rank == 0:
                        with torch.no_grad():  # the unwrapped module: DDP's forward may call collectives
                            model.eval()
                            inputs, labels = (t.to(device) for t in dataset.tensors)  # where the model is
                            hits = (model(inputs).argmax(1) == labels).double().sum()
                            model.train()
                        time.sleep(eval_seconds)  # the other ranks wait in their next collective
                        if collective_in_eval:
                            dist.all_reduce(hits)  # only rank 0 gets here
                        accuracy = hits.item() / len(dataset)
        except RuntimeError as error:
            if not collective_in_eval:
                raise
            events = sorted(tracing.events(), key=lambda e: e.time_range.start)
            called = [e.name.removeprefix("c10d::").rstrip("_") for e in events if e.name.startswith("c10d::")]
            trace = ", ".join(called)
            raise RuntimeError(f"{error} | this rank's collectives from the first step on: {trace}") from None
        checksum = round(sum(p.detach().sum().item() for p in model.parameters()), 4)
        return {"rank": rank, "accuracy": accuracy, "checksum": checksum}


def mismatched_collectives(rank: int, world_size: int) -> dict:
    """Rank 0 all-reduces an "accuracy" while every other rank all-reduces a "loss" of the same shape.
    Collectives pair by the order each rank calls them, not by what they mean, so both calls finish
    and every rank gets the sum of the two unrelated numbers.

    Returns {"rank", "sent", "received"}.
    """
    with process_group(rank, world_size) as device:
        sent = 100.0 if rank == 0 else 0.5  # rank 0: accuracy in percent; the others: a loss
        value = torch.tensor([sent], device=device)
        dist.all_reduce(value)
        return {"rank": rank, "sent": sent, "received": value.item()}


def rank0_saves(rank: int, world_size: int, directory: str, work_s: float = 0.5, timeout_s: float = 60.0) -> dict:
    """Rank 0 alone does some work (sleeps ``work_s``, as a long evaluation would) and saves the
    model; then every rank looks for the file. Done twice: with a ``dist.barrier()`` between the
    save and the look, then without one.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        directory: an existing directory for the two files.
        work_s: seconds of rank-0-only work before each save.
        timeout_s: the process group's timeout: rank-0 work longer than it fails the barrier.

    Returns {"rank", "found" ({"barrier": bool, "no barrier": bool}: whether the file was there when
    this rank looked), "waited_s" (seconds this rank spent in the barrier, rounded to 0.1)}.
    """
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        torch.manual_seed(0)
        model = LoopNet()
        found, waited_s = {}, None
        for way in ("barrier", "no barrier"):
            path = os.path.join(directory, f"{way.replace(' ', '_')}.pt")
            if rank == 0:
                time.sleep(work_s)  # rank-0-only work: an evaluation, a save
                torch.save(model.state_dict(), path)
            if way == "barrier":
                start = time.perf_counter()
                dist.barrier()  # every rank waits here until rank 0 has saved
                waited_s = round(time.perf_counter() - start, 1)
            found[way] = os.path.exists(path)
        dist.barrier()  # rank 1 must not leave while rank 0 still saves
        return {"rank": rank, "found": found, "waited_s": waited_s}


def seeds_and_logging(rank: int, world_size: int, seed: int = 0, n_eval: int = 11) -> dict:
    """One seed on every rank for the initial weights (DDP copies rank 0's anyway; the seed makes the run
    reproducible), seed + rank for what must differ (dropout masks, augmentation), and logging that is
    quiet on every rank but 0 except for warnings.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        seed: the base seed.
        n_eval: held-out samples; a rank whose shard holds a padding duplicate logs a warning.

    Returns {"rank", "init_checksum" (the same on every rank), "dropout_mask" (this rank's first
    dropout mask, as 0/1 ints: different on each rank)}.
    """
    with process_group(rank, world_size):
        log = setup_logging(rank)
        torch.manual_seed(seed)  # the same initial weights on every rank, run after run
        model = LoopNet(hidden=8, dropout=0.5)
        init_checksum = round(sum(p.detach().sum().item() for p in model.parameters()), 4)
        torch.manual_seed(seed + rank)  # from here on, random streams differ between ranks
        mask = (model.dropout(torch.ones(1, 8)) != 0).int().flatten().tolist()
        log.info("model with %d parameters, seed %d, world size %d", sum(p.numel() for p in model.parameters()),
                 seed, world_size)
        padded = len(range(rank, math.ceil(n_eval / world_size) * world_size, world_size)) - len(
            range(rank, n_eval, world_size))
        if padded:
            log.warning("my evaluation shard holds %d padding duplicate(s)", padded)
        log.info("done")
        return {"rank": rank, "init_checksum": init_checksum, "dropout_mask": mask}


# ---- helpers

class LoopNet(nn.Module):
    """Lesson 05's MoonsNet shape, Linear(2, hidden) -> ReLU -> Dropout -> Linear(hidden, 2); with the
    same seed it starts from the same weights (dropout has none).

    A class of its own, not an nn.Sequential, so that torch.compile sees its forward: under DDP,
    dynamo meets the model's forward as a frame of its own, and skips the frames of torch.nn's
    own modules (see compiled.py).
    """

    def __init__(self, hidden: int = 32, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.relu(self.fc1(x))))


def counting_allreduce(state: dict, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's own ``allreduce_hook``, after counting the call: one per bucket DDP all-reduces."""
    state["all_reduces"] += 1
    return default_hooks.allreduce_hook(None, bucket)


class RankFilter(logging.Filter):
    """Adds ``record.rank`` so that a format can say which rank logged the line."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int, name: str = "train_loop") -> logging.Logger:
    """A logger that prints INFO and above on rank 0 and WARNING and above on the other ranks, each
    line prefixed with its rank (no timestamps, so that runs compare line by line)."""
    handler = logging.StreamHandler()  # stderr
    handler.addFilter(RankFilter(rank))
    handler.setFormatter(logging.Formatter("[rank %(rank)d] %(levelname)s %(message)s"))
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    return logger
