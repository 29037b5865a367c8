"""The common form of the stray metric (lesson 07): rank 0 alone all-reduces an evaluation metric
every few steps, while the other ranks go on to the next step, whose backward runs DDP's gradient
all-reduce. The two calls are the same operation with different sizes: gloo on rank 0 receives
more bytes than its one-number metric holds, and aborts the process (SIGABRT).
"""

from __future__ import annotations

from datetime import timedelta


def evaluate_every_n_steps(rank: int, world_size: int, every: int = 2, steps: int = 4,
                           timeout_s: float = 3.0, batchnorm: bool = False) -> list[float]:
    """A DDP loop on a 9-parameter model. After every ``every``-th step, rank 0 alone all-reduces its
    loss, as an evaluation under ``if rank == 0:`` would. ``batchnorm=True`` puts a ``BatchNorm1d``
    first, whose buffers DDP broadcasts. Returns the losses, if it ever gets there."""
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
                                  timeout_s: float = 3.0, probe: str = "", barrier: bool = True,
                                  skip_probe_rank: int | None = None) -> list[float]:
    """After each epoch, rank 0 alone evaluates through the DDP model, then every rank meets in
    ``dist.barrier()``. ``through_module=True`` evaluates ``ddp.module``, the plain model: the fix.
    ``barrier=False`` leaves the barrier out, and rank 0 prints a line after each evaluation.
    ``skip_probe_rank``: that rank skips the epoch's end (the probe and the barrier) and goes on.
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
        # probe: "epoch_end" puts a monitored_barrier in place of the epoch-end barrier, "branch" in
        # probe: rank 0's branch, before the evaluation. Rank 0 coordinates it: only its error lists
        # probe: missing ranks. Lines that end in "# probe" are the probe's; the lesson shows the rest.
        # probe: every rank creates its group (groups are numbered in creation order); only gloo
        # probe: implements monitored_barrier, so a GPU job on nccl needs this group too.
        if probe not in ("", "epoch_end", "branch"):  # probe (argument check)
            raise ValueError(f'probe must be "", "epoch_end" or "branch", not {probe!r}')  # probe (argument check)
        probe_group = dist.new_group(backend="gloo", timeout=timeout) if probe else None  # probe
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Sequential(torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        inputs = torch.randn(16, 8)
        targets = inputs.sum(dim=1, keepdim=True)
        evaluations = []
        for epoch in range(epochs):
            for _step in range(2):
                loss = torch.nn.functional.mse_loss(ddp(inputs), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            if rank == 0:  # only rank 0 evaluates
                if probe == "branch":  # probe branch: names the ranks that skip the branch; remove it once read
                    dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)  # probe branch
                evaluations.append(round(evaluate(ddp.module if through_module else ddp, inputs, targets), 4))
                if not barrier:  # variant: without the barrier below, say which evaluations ended
                    print(f"rank 0 finished its evaluation of epoch {epoch}", flush=True)  # variant
            if rank == skip_probe_rank:  # variant: this rank skips the epoch's end (lesson 07, exercise 1)
                continue  # variant
            if probe == "epoch_end":  # probe: in place of the barrier, where every rank should pass
                dist.monitored_barrier(group=probe_group, timeout=timeout, wait_all_ranks=True)  # probe
                continue  # probe: the epoch ends here, without the barrier below
            if not barrier:  # variant: the epoch ends without the barrier
                continue  # variant
            dist.barrier()  # every rank: wait for the evaluation, as before saving a checkpoint
        return evaluations


def source_without_probe() -> str:
    """The source of :func:`evaluate_through_ddp_on_rank0` without the lines marked ``# probe`` or
    ``# variant``: the loop as lesson 07 first shows it, before the monitored-barrier probe is
    introduced, and without the switch that leaves the barrier out."""
    import inspect

    lines = inspect.getsource(evaluate_through_ddp_on_rank0).splitlines(keepends=True)
    return "".join(line for line in lines if "# probe" not in line and "# variant" not in line)


def probe_lines(placement: str = "") -> str:
    """The probe's own lines in :func:`evaluate_through_ddp_on_rank0`, as the worker runs them, in the
    loop lines that hold them: each line marked ``# probe`` that is code (no comment-only line, no
    argument check), and the loop's ``for``, ``if rank == 0:``, evaluation and barrier lines.
    Comments are dropped, the lines dedented, and ``...`` stands where other lines were left out
    (lines marked ``# variant`` are skipped without one). ``placement="epoch_end"`` leaves out the
    lines of the other placement (marked ``# probe branch``) the same way; ``""`` shows both."""
    import inspect
    import re
    import textwrap

    anchors = ("for epoch", "if rank == 0:", "evaluations.append(", "dist.barrier()")
    shown, gap = [], False
    for line in inspect.getsource(evaluate_through_ddp_on_rank0).splitlines():
        stripped = line.strip()
        if "# variant" in line or (placement == "epoch_end" and "# probe branch" in line):
            continue
        is_probe = "# probe" in line and not stripped.startswith("#") and "# probe (argument check)" not in line
        if is_probe or stripped.startswith(anchors):
            code = re.sub(r"\s+#.*$", "", line)
            if gap and shown:
                shown.append(" " * (len(code) - len(code.lstrip())) + "...")
            shown.append(code)
            gap = False
        else:
            gap = True
    return textwrap.dedent("\n".join(shown)) + "\n"
