"""The common form of the stray metric (lesson 07): rank 0 alone all-reduces an evaluation metric
every few steps, while the other ranks go on to the next step, whose backward runs DDP's gradient
all-reduce. The two calls are the same operation with different sizes: gloo on rank 0 receives
more bytes than its one-number metric holds, and aborts the process (SIGABRT).
"""

from __future__ import annotations

from datetime import timedelta


def evaluate_every_n_steps(rank: int, world_size: int, every: int = 2, steps: int = 4,
                           timeout_s: float = 3.0, batchnorm: bool = False) -> list[float]:
    """A DDP loop on a 9-parameter model. After step ``every - 1`` (and every ``every`` steps), rank 0
    all-reduces its loss alone, as an evaluation guarded by ``if rank == 0:`` would; the other ranks
    meet it with the next step's gradient all-reduce. With ``batchnorm=True`` a ``BatchNorm1d`` comes
    first: its buffers make DDP broadcast them at the start of each forward
    (``forward_sync_buffers=True``, the default, ``broadcast_buffers`` before torch 2.13; skipped after
    a forward under ``no_grad`` or ``no_sync``), so the other ranks meet the metric with that broadcast
    instead, and both sides wait until the timeout. Returns the losses, if it ever gets there."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group

    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)):
        torch.manual_seed(0)
        linear = torch.nn.Linear(8, 1)  # 9 parameters: one bucket of 9 gradients
        ddp = DDP(torch.nn.Sequential(torch.nn.BatchNorm1d(8), linear) if batchnorm else linear)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        inputs = torch.randn(16, 8)
        targets = inputs.sum(dim=1, keepdim=True)
        losses = []
        for step in range(steps):
            loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
            optimizer.zero_grad()
            loss.backward()  # DDP's gradient all-reduce runs in here
            optimizer.step()
            losses.append(loss.item())
            if rank == 0 and step % every == every - 1:  # the bug: only rank 0 evaluates
                metric = loss.detach().reshape(1)
                dist.all_reduce(metric)
        return losses


def evaluate_through_ddp_on_rank0(rank: int, world_size: int, through_module: bool = False, epochs: int = 2,
                                  timeout_s: float = 3.0, probe: str = "") -> list[float]:
    """The classic form, with no collective in the evaluation: after each epoch rank 0 alone evaluates
    through the DDP model (``if rank == 0: evaluate(ddp, ...)``), then every rank meets in
    ``dist.barrier()``, as before saving a checkpoint. The model starts with a ``BatchNorm1d``, so DDP
    broadcasts its buffers (``forward_sync_buffers=True``, the default) at the start of its first
    forward and of the first forward after a training step, even under ``no_grad``
    (``require_forward_param_sync``): rank 0 waits in that broadcast while the others wait in the
    barrier, until the timeout. With ``through_module=True`` rank 0 evaluates ``ddp.module``,
    the plain model, which runs no collective: the fix. ``probe`` adds ``monitored_barrier``, on a
    gloo group made for it: ``"epoch_end"`` puts it in place of the epoch-end ``dist.barrier()``, where
    every rank should pass. Rank 0 coordinates the barrier: the errors of ranks 1 and up always point at
    rank 0, and only rank 0's own error lists missing ranks. Here rank 0 never comes, held in
    ``evaluate(ddp, ...)``, so it raises a plain timeout and that pointer at rank 0 is the whole clue.
    ``"branch"`` puts it in rank 0's branch, before the evaluation, so rank 0's error names every rank
    that skips the branch.
    Returns rank 0's evaluation loss per epoch (an empty list on the other ranks)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group

    def evaluate(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        model.eval()
        with torch.no_grad():
            loss = torch.nn.functional.mse_loss(model(inputs), targets).item()
        model.train()
        return loss

    timeout = timedelta(seconds=timeout_s)
    with process_group(rank, world_size, timeout=timeout):
        # The probe's group: every rank creates it (groups are numbered in creation order), only gloo
        # implements monitored_barrier, so a GPU job on nccl needs it too.
        if probe not in ("", "epoch_end", "branch"):
            raise ValueError(f'probe must be "", "epoch_end" or "branch", not {probe!r}')
        probe_group = dist.new_group(backend="gloo", timeout=timeout) if probe else None
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Sequential(torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        inputs = torch.randn(16, 8)
        targets = inputs.sum(dim=1, keepdim=True)
        evaluations = []
        for _epoch in range(epochs):
            for _step in range(2):
                loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if rank == 0:  # only rank 0 evaluates
                if probe == "branch":  # while debugging: names the ranks that do not come, then remove it
                    dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)
                evaluations.append(round(evaluate(ddp.module if through_module else ddp, inputs, targets), 4))
            if probe == "epoch_end":  # while debugging, in place of the barrier: names a rank that does not come
                dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)
            else:
                dist.barrier()  # every rank: wait for the evaluation, as before saving a checkpoint
        return evaluations
