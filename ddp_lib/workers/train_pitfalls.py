"""Small workers for lesson 05's side topics: the ``module.`` prefix in a DDP state_dict,
torch's SyncBatchNorm on a CPU, uneven inputs with ``Join``, evaluation on rank 0 alone, stopping
together on rank 0's decision; and ``train_runs``, several of the lesson's ``train`` runs in one job."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

try:  # inside the ddp_lib package
    from ddp_lib.process_group import device_ids_for, process_group
    from ddp_lib.workers.shared import make_moons, param_checksum
    from ddp_lib.workers.train import MoonsNet, train
except ModuleNotFoundError:  # copied into a project next to process_group.py, shared.py and train.py
    from process_group import device_ids_for, process_group
    from shared import make_moons, param_checksum
    from train import MoonsNet, train


def state_dict_keys(rank: int, world_size: int) -> dict:
    """The keys of a DDP model's state_dict and of its ``.module``, what loading the DDP keys
    into a plain model says, and whether stripping the prefix fixes it. ``"ddp_state"`` is
    ``ddp_model.state_dict()`` itself, prefix and ``_metadata`` included, for the caller to strip."""
    with process_group(rank, world_size) as device:
        ddp_model = DDP(MoonsNet().to(device), device_ids=device_ids_for(device))
        wrapped = ddp_model.state_dict()
        plain = MoonsNet()
        try:
            plain.load_state_dict(wrapped)
            error = ""
        except RuntimeError as exc:
            error = str(exc).splitlines()[0] + " " + str(exc).splitlines()[1].strip()[:60] + "..."
        consume_prefix_in_state_dict_if_present(wrapped, "module.")  # in place
        fixed = str(plain.load_state_dict(wrapped))
        return {"ddp_keys": list(ddp_model.state_dict()), "module_keys": list(ddp_model.module.state_dict()),
                "load_error": error, "after_strip": fixed, "ddp_state": ddp_model.state_dict()}


def torch_sync_batchnorm(rank: int, world_size: int) -> str:
    """Wrap a model holding torch's ``nn.SyncBatchNorm`` in DDP on this rank's device."""
    with process_group(rank, world_size) as device:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(MoonsNet(norm="batch")).to(device)
        DDP(model, device_ids=device_ids_for(device))
        return f"DDP accepted nn.SyncBatchNorm on {device.type}"


def uneven_batches(rank: int, world_size: int, use_join: int = 1, divide_by_initial_world_size: bool = True,
                   batch_size: int = 16, seed: int = 0, momentum: float = 0.0, steps_after: int = 0,
                   norm: str = "none", forward_sync_buffers: bool = True) -> dict:
    """Rank r trains on 2 + 2*r batches (uneven on purpose), inside ``Join`` when use_join is 1.
    Returns {"rank", "steps", "checksum" (at the block's end), "checksums" (after each own step),
    "collectives" ({"step 1": {operator: count}, ..., "Join's exit": ...}), "grad_ratio" (per own
    step: the norm of the gradient DDP left over that of this rank's batch alone), "checksums_after"
    (after each of ``steps_after`` steps that every rank takes after the block), "buffers" (the sum
    of the floating-point buffers at the block's end: batch norm's running statistics with
    ``norm="batch"``, 0 without buffers)}.
    ``momentum`` is SGD's: its state stays on each rank, which ``Join`` does not sync.
    ``norm`` is MoonsNet's; ``forward_sync_buffers`` is DDP's (False: each rank keeps its own buffers)."""
    with process_group(rank, world_size) as device:
        torch.manual_seed(seed)
        x, y = make_moons().tensors
        steps = 2 + 2 * rank
        ddp_model = DDP(MoonsNet(norm=norm).to(device), device_ids=device_ids_for(device),
                        forward_sync_buffers=forward_sync_buffers)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1, momentum=momentum)
        loss_fn = nn.CrossEntropyLoss()
        checksums, grad_ratio = [], []  # after each of this rank's own steps
        log = CollectiveLog()
        # Join: a rank that has run out of batches keeps answering the others' collectives
        # (with zeros for the gradients), so nobody waits for a peer that has left.
        with log, Join([ddp_model], enable=bool(use_join), divide_by_initial_world_size=divide_by_initial_world_size):
            for step in range(steps):
                log.phase = f"step {step + 1}"
                start = (step * world_size + rank) * batch_size
                xb, yb = x[start:start + batch_size].to(device), y[start:start + batch_size].to(device)
                own = copy.deepcopy(ddp_model.module)  # a plain copy: this rank's batch alone
                loss_fn(own(xb), yb).backward()
                optimizer.zero_grad()
                loss_fn(ddp_model(xb), yb).backward()
                grad_ratio.append(round(gradient_norm(ddp_model.module) / gradient_norm(own), 3))
                optimizer.step()
                checksums.append(round(param_checksum(ddp_model.module), 4))
            log.phase = "Join's exit"  # what the block's end runs
        checksum, checksums_after = round(param_checksum(ddp_model.module), 4), []
        buffers = round(sum(b.double().sum().item() for b in ddp_model.module.buffers() if b.is_floating_point()), 4)
        for step in range(2 * world_size, 2 * world_size + steps_after):  # every rank: batches no rank used
            start = (step * world_size + rank) * batch_size
            xb, yb = x[start:start + batch_size].to(device), y[start:start + batch_size].to(device)
            optimizer.zero_grad()
            loss_fn(ddp_model(xb), yb).backward()
            optimizer.step()
            checksums_after.append(round(param_checksum(ddp_model.module), 4))
        return {"rank": rank, "steps": steps, "checksum": checksum, "checksums": checksums,
                "collectives": log.counts, "grad_ratio": grad_ratio, "checksums_after": checksums_after,
                "buffers": buffers}


def rank0_evaluation(rank: int, world_size: int, through: Literal["module", "wrapper"] = "module",
                     timeout_s: float = 3.0) -> dict:
    """One forward and backward of an untrained MoonsNet with BatchNorm under DDP (no optimizer step:
    the accuracy is near chance, only whether the evaluation finishes matters), then evaluate on rank 0 only while the
    other ranks wait at a barrier: through ``ddp_model.module`` (works) or through ``ddp_model``
    itself, whose forward first broadcasts the buffers, a collective the other ranks never join.
    DDP gets its own group with a short timeout, so rank 0's broadcast ends in a timeout error
    instead of hanging.

    Args:
        through: "module" (ddp_model.module(x)) or "wrapper" (ddp_model(x)).
        timeout_s: the timeout in seconds of the group DDP uses.
    """
    with process_group(rank, world_size) as device:
        # The short timeout only on the group DDP uses, so that slow start-ups cannot trip it.
        group = dist.new_group(timeout=timedelta(seconds=timeout_s))
        torch.manual_seed(0)
        x, y = make_moons().tensors
        ddp_model = DDP(MoonsNet(norm="batch").to(device), device_ids=device_ids_for(device),
                        process_group=group)
        nn.CrossEntropyLoss()(ddp_model(x[:32].to(device)), y[:32].to(device)).backward()
        accuracy = None
        if rank == 0:
            model = ddp_model.module if through == "module" else ddp_model
            model.eval()
            with torch.no_grad():
                accuracy = (model(x.to(device)).argmax(1).cpu() == y).float().mean().item()
        dist.barrier()  # the default group: the others wait as long as it allows
        return {"rank": rank, "accuracy": None if accuracy is None else round(accuracy, 4)}


def train_runs(rank: int, world_size: int, runs: list[dict]) -> list[dict]:
    """Several ``train`` runs, one per dict of keyword arguments, in one job: they share one process
    group, so the ranks start once (the slow part). Returns each run's result, in order."""
    with process_group(rank, world_size):
        return [train(rank, world_size, **kwargs) for kwargs in runs]


def stop_together(rank: int, world_size: int, agree: bool = True, target_loss: float = 0.5,
                  batch_size: int = 16, timeout_s: float = 3.0) -> dict:
    """Train MoonsNet under DDP until rank 0's batch loss falls below ``target_loss``: a decision
    rank 0 alone takes, as early stopping or a NaN check does. With ``agree``, rank 0 broadcasts
    its decision every step, so every rank stops at the same step. Without it, rank 0 stops alone
    and the others' next gradient all-reduce has no partner (an error, or a timeout of ``timeout_s``).
    Returns {"rank", "steps"}."""
    # A short group timeout, so that a lost partner ends in an error.
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        torch.manual_seed(0)
        x, y = make_moons().tensors
        ddp_model = DDP(MoonsNet().to(device), device_ids=device_ids_for(device))
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1, momentum=0.9)
        for step in range(1, len(x) // (batch_size * world_size) + 1):
            start = ((step - 1) * world_size + rank) * batch_size
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp_model(x[start:start + batch_size].to(device)),
                                               y[start:start + batch_size].to(device))
            loss.backward()
            optimizer.step()
            stop = torch.tensor([float(rank == 0 and loss.item() < target_loss)], device=device)
            if agree:
                dist.broadcast(stop, src=0)  # every rank now holds rank 0's decision
            if stop.item():
                break
        return {"rank": rank, "steps": step}


# ---- helpers


class CollectiveLog(TorchDispatchMode):
    """While active, counts the c10d operators this process runs (every collective reaches one,
    DDP's and Join's included), under the label last put in ``phase``."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = ""
        self.counts: dict[str, dict[str, int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        if name.startswith("c10d::"):
            counts = self.counts.setdefault(self.phase, {})
            op = name.removeprefix("c10d::")
            counts[op] = counts.get(op, 0) + 1
        return func(*args, **(kwargs or {}))


def gradient_norm(model: nn.Module) -> float:
    return torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item()
