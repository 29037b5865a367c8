"""Lesson 05's checks: a metric counted two ways; batch norm statistics per rank, and whose data they
describe; evaluation on rank 0 through the wrapper with the buffer sync off and with one process group;
the template on the half-moons, with a crash on purpose; your own collective inside ``Join``; a
save that fails half-way; and two runners that launch a 2-rank job and return its outcome
(:func:`run_rank0_eval`, :func:`run_uneven_without_join`), for the lesson's main line; the collectives
of forwards through ``ddp_model`` after one training step (:func:`forward_collectives`); and
:func:`run_commands_at_once`, which runs terminal commands (``python template.py``, ``torchrun ...``) as
typed, side by side;
and :func:`warmup_rates`, the template's warm-up read from a real optimizer."""

from __future__ import annotations

import inspect
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

from ddp_lib.errors import WorkerError
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import device_ids_for, free_port, process_group
from ddp_lib.workers import template
from ddp_lib.workers.point_to_point import gloo_message
from ddp_lib.workers.shared import make_moons
from ddp_lib.workers.train import MoonsNet
from ddp_lib.workers.train_pitfalls import CollectiveLog, uneven_batches


def _batchnorm_net() -> nn.Module:
    """Linear(2, 8) -> BatchNorm1d(8) -> ReLU -> Linear(8, 2), seeded alike on every rank."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def batchnorm_statistics(rank: int, world_size: int, steps: int = 4, batch_size: int = 16) -> dict:
    """Train the batch norm net ``steps`` steps under DDP, rank ``r`` on samples ``r, r + N, ...``.
    Returns this rank's running mean (first 3 of 8 entries, 4 places) after training; the ranks' mean
    of it, all-reduced on a copy and divided by the world size; and this rank's running mean again after
    one evaluation forward through ``ddp_model`` under ``torch.no_grad()``."""
    with process_group(rank, world_size) as device:
        ddp_model = DDP(_batchnorm_net().to(device), device_ids=device_ids_for(device))
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        x, y = (t[rank::world_size].to(device) for t in make_moons().tensors)
        for step in range(steps):
            rows = slice(step * batch_size, (step + 1) * batch_size)
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp_model(x[rows]), y[rows]).backward()
            optimizer.step()
        batchnorm = ddp_model.module[1]
        after_training = [round(v, 4) for v in batchnorm.running_mean[:3].tolist()]
        averaged = batchnorm.running_mean.clone()
        dist.all_reduce(averaged)
        averaged /= world_size
        ddp_model.eval()
        with torch.no_grad():
            ddp_model(x[:batch_size])  # its first forward after training broadcasts rank 0's buffers
        after_wrapper_eval = [round(v, 4) for v in batchnorm.running_mean[:3].tolist()]
        return {"after_training": after_training, "after_wrapper_eval": after_wrapper_eval,
                "averaged": [round(v, 4) for v in averaged[:3].tolist()]}


def accuracy_two_ways(rank: int, world_size: int, n: int = 10) -> dict:
    """Samples ``0 .. n-1``, and a model that is right on every sample not divisible by 3. Each rank
    counts its correct samples and its samples in two splits, and one all-reduce adds up each pair:
    the strided split ``r, r + N, ...`` (each sample once) and ``DistributedSampler``'s, which pads.
    Returns {"strided": (correct, counted), "DistributedSampler": (correct, counted), "true": (correct, n)}."""
    with process_group(rank, world_size) as device:
        def right(i: int) -> bool:
            return i % 3 != 0

        splits = {"strided": list(range(rank, n, world_size)),
                  "DistributedSampler": list(DistributedSampler(range(n), shuffle=False))}
        counts = {}
        for name, mine in splits.items():
            totals = torch.tensor([sum(right(i) for i in mine), len(mine)], dtype=torch.float64, device=device)
            dist.all_reduce(totals)  # sums over the ranks
            counts[name] = (int(totals[0]), int(totals[1]))
        counts["true"] = (sum(right(i) for i in range(n)), n)
        return counts


def batchnorm_data_sources(rank: int, world_size: int, forward_sync_buffers: bool = True, steps: int = 20,
                           batch_size: int = 16) -> dict:
    """A ``BatchNorm1d(1)`` under ``DDP(..., forward_sync_buffers=...)`` trains ``steps`` steps, rank ``r``
    on batches of one feature around ``10·r``. Returns this rank's running mean after training, its
    average over the ranks (an all-reduce divided by the world size), and the running mean one process
    would keep over the global batches (the moving average of their means, with the layer's momentum).
    The same for the running variance: "var_averaged" and "var_global" (the unbiased variance of each
    global batch, as ``BatchNorm1d`` keeps it)."""
    with process_group(rank, world_size) as device:
        return _batchnorm_sources(rank, world_size, device, forward_sync_buffers, steps, batch_size)


def batchnorm_data_sources_both(rank: int, world_size: int, steps: int = 20, batch_size: int = 16) -> dict:
    """:func:`batchnorm_data_sources` with ``forward_sync_buffers=True``, then ``False``, in one job (the
    ranks start once). Returns {True: result, False: result}."""
    with process_group(rank, world_size) as device:
        return {sync: _batchnorm_sources(rank, world_size, device, sync, steps, batch_size) for sync in (True, False)}


def _batchnorm_sources(rank: int, world_size: int, device: torch.device, forward_sync_buffers: bool, steps: int,
                       batch_size: int) -> dict:
    def batch(step: int, r: int) -> torch.Tensor:
        noise = torch.randn(batch_size, 1, generator=torch.Generator().manual_seed(1000 * step + r))
        return noise + 10.0 * r

    layer = nn.BatchNorm1d(1)
    ddp_model = DDP(layer.to(device), device_ids=device_ids_for(device), forward_sync_buffers=forward_sync_buffers)
    global_ema, global_var = 0.0, 1.0  # the running mean starts at 0, the running variance at 1
    for step in range(steps):
        ddp_model(batch(step, rank).to(device)).square().mean().backward()
        global_batch = torch.cat([batch(step, r) for r in range(world_size)])
        global_ema = (1 - layer.momentum) * global_ema + layer.momentum * global_batch.mean().item()
        global_var = (1 - layer.momentum) * global_var + layer.momentum * global_batch.var().item()
    averaged = torch.cat([layer.running_mean, layer.running_var])  # both averaged over the ranks
    dist.all_reduce(averaged)
    averaged /= world_size
    mean, var = averaged.tolist()
    return {"own": round(layer.running_mean.item(), 2), "averaged": round(mean, 2), "global": round(global_ema, 2),
            "var_averaged": round(var, 2), "var_global": round(global_var, 2)}


def rank0_eval_without_buffer_sync(rank: int, world_size: int, timeout_s: float = 2.0) -> dict:
    """One training step of the batch norm net under ``DDP(..., forward_sync_buffers=False)``,
    then rank 0 alone evaluates through ``ddp_model`` while the others wait at a barrier. DDP's
    group has a ``timeout_s`` timeout, so a hang would end in an error. Returns {"rank", "accuracy"}."""
    with process_group(rank, world_size) as device:
        group = dist.new_group(timeout=timedelta(seconds=timeout_s))
        x, y = (t.to(device) for t in make_moons().tensors)
        ddp_model = DDP(_batchnorm_net().to(device), device_ids=device_ids_for(device),
                        process_group=group, forward_sync_buffers=False)
        nn.functional.cross_entropy(ddp_model(x[:32]), y[:32]).backward()
        accuracy = None
        if rank == 0:
            ddp_model.eval()
            with torch.no_grad():
                accuracy = round((ddp_model(x).argmax(1) == y).float().mean().item(), 4)
        dist.barrier()
        return {"rank": rank, "accuracy": accuracy}


def own_allreduce_in_join(rank: int, world_size: int, throw_on_early_termination: bool = False,
                          timeout_s: float = 2.0) -> dict:
    """Rank ``r`` trains ``2 + 2r`` steps inside ``with Join([ddp_model], ...)`` and all-reduces its
    own loss after each step, a collective ``Join`` does not know of. DDP's group has a ``timeout_s``
    timeout. Returns {"rank", "steps" done, "error": None or the first sentence of the rank's error
    (without gloo's source path and peer address), "timed_out": whether a timeout ended the wait, this
    rank's own or its peer's, which then closes the connection}."""
    with process_group(rank, world_size) as device:
        group = dist.new_group(timeout=timedelta(seconds=timeout_s))
        ddp_model = DDP(nn.Linear(2, 1).to(device), device_ids=device_ids_for(device), process_group=group)
        x = torch.ones(4, 2, device=device)
        steps, error, timed_out = 0, None, False
        try:
            with Join([ddp_model], throw_on_early_termination=throw_on_early_termination):
                for _ in range(2 + 2 * rank):
                    loss = ddp_model(x).sum()
                    loss.backward()
                    dist.all_reduce(loss.detach(), group=group)  # a per-step loss average: your own collective
                    steps += 1
        except RuntimeError as e:
            error = gloo_message(str(e))  # its first sentence, without gloo's source path and peer address
            # The rank whose timeout ends first closes its connections, so the other may see that instead.
            timed_out = any(word in str(e) for word in ("Timed out", "timeout", "Connection closed by peer"))
        return {"rank": rank, "steps": steps, "error": error, "timed_out": timed_out}


class _FailsWhenSaved:
    """An object whose pickling raises: ``torch.save`` stops after writing part of the file."""

    def __reduce__(self):
        raise RuntimeError("the save failed half-way")


def interrupted_save(save, directory: str) -> dict:
    """Write a checkpoint {"epoch": 1} to ``directory/last.pt``, then try to overwrite it with
    {"epoch": 2, ...} whose save fails half-way: once with ``save(path, state)`` (the atomic write
    under test) and once with a plain ``torch.save(state, path)``. Returns, for each, what loading
    ``last.pt`` then gives: "epoch N", or the error's type."""
    path = os.path.join(directory, "last.pt")
    outcome = {}
    for name, write in (("atomic save", save), ("plain torch.save", lambda p, s: torch.save(s, p))):
        save(path, {"epoch": 1, "weights": torch.ones(1000)})
        try:
            write(path, {"epoch": 2, "weights": torch.zeros(1000), "extra": _FailsWhenSaved()})
        except RuntimeError:
            pass
        try:
            outcome[name] = f"epoch {torch.load(path, weights_only=True)['epoch']}"
        except Exception as e:  # noqa: BLE001 - the point is which error a half file gives
            outcome[name] = type(e).__name__
        for leftover in os.listdir(directory):
            os.remove(os.path.join(directory, leftover))
    return outcome


CODE_RUNS: list[str] = []


def _run_on_load(message: str) -> str:
    """The function a crafted checkpoint names: loading it calls this, which leaves a trace."""
    CODE_RUNS.append(message)
    return message


class _NamesCode:
    """An object whose pickle says "call ``_run_on_load`` when loaded"."""

    def __reduce__(self):
        return (_run_on_load, ("a function the file named ran",))


def weights_only_refusal(directory: str) -> dict:
    """Save a checkpoint that names a function to call, then load it with ``weights_only=True`` and
    with ``weights_only=False``. Returns, for each, the error's type, or the traces the call left."""
    path = os.path.join(directory, "crafted.pt")
    torch.save({"epoch": 1, "extra": _NamesCode()}, path)
    outcome = {}
    for weights_only in (True, False):
        CODE_RUNS.clear()
        try:
            torch.load(path, weights_only=weights_only)
            outcome[f"weights_only={weights_only}"] = f"loaded; {CODE_RUNS or 'no code ran'}"
        except Exception as e:  # noqa: BLE001 - the refusal's type is the point
            outcome[f"weights_only={weights_only}"] = f"refused: {type(e).__name__}"
    return outcome


def failed_in_buffer_sync(error) -> bool:
    """For a ``WorkerError`` from a rank-0 evaluation: True when rank 0 failed inside DDP's broadcast of
    the buffers at the start of a forward (its traceback passes through DDP's ``_sync_buffers``)."""
    return error.rank == 0 and "_sync_buffers" in error.worker_traceback


def rank0_eval_one_group(rank: int, world_size: int, through: Literal["module", "wrapper"] = "wrapper",
                         timeout_s: float = 2.0) -> dict:
    """A real job's layout: one process group (here with a ``timeout_s`` timeout), one training forward
    and backward of MoonsNet with batch norm, then rank 0 evaluates while the other ranks wait at a
    barrier: through ``ddp_model.module`` (works) or through ``ddp_model`` itself (a mistake). Rank 0's
    forward through the wrapper broadcasts the buffers, the others' barrier never matches it, and on
    gloo the group's timeout ends both waits with an error on every rank. Returns {"rank", "accuracy"}."""
    with process_group(rank, world_size, timeout=timedelta(seconds=timeout_s)) as device:
        torch.manual_seed(0)
        x, y = make_moons().tensors
        ddp_model = DDP(MoonsNet(norm="batch").to(device), device_ids=device_ids_for(device))
        nn.functional.cross_entropy(ddp_model(x[:32].to(device)), y[:32].to(device)).backward()
        accuracy = None
        if rank == 0:
            model = ddp_model.module if through == "module" else ddp_model
            model.eval()
            with torch.no_grad():
                accuracy = round((model(x.to(device)).argmax(1).cpu() == y).float().mean().item(), 4)
        dist.barrier()
        return {"rank": rank, "accuracy": accuracy}


def one_group_failure(error) -> dict:
    """What a ``WorkerError`` from :func:`rank0_eval_one_group` tells a reader: whether rank 0 raised inside
    DDP's buffer broadcast, and whether any rank's error message names what went wrong: the buffers, the
    broadcast, the barrier or the evaluation."""
    words = ("buffer", "broadcast", "barrier", "eval")
    return {"rank 0 in the buffer sync": failed_in_buffer_sync(error),
            "a message names the cause": any(w in m.lower() for m in error.failures.values() for w in words)}


def run_rank0_eval(through: Literal["module", "wrapper"], timeout_s: float = 2.0) -> dict:
    """Run :func:`rank0_eval_one_group` on 2 ranks, rank 0 evaluating ``through`` the module or the wrapper.

    Returns {"finished" (every rank passed the barrier), "accuracy" (rank 0's, or None), "errors" ({rank:
    the first line of its error}, see :func:`error_lines`), "in_buffer_broadcast" (rank 0 failed inside
    DDP's broadcast of the buffers, :func:`failed_in_buffer_sync`), "names_the_cause" (an error message
    names the buffers, the broadcast, the barrier or the evaluation, :func:`one_group_failure`)}."""
    try:
        results = run_ranks(rank0_eval_one_group, 2, kwargs=dict(through=through, timeout_s=timeout_s),
                            show_output=False)
    except WorkerError as e:
        return {"finished": False, "accuracy": None, "errors": error_lines(e),
                "in_buffer_broadcast": failed_in_buffer_sync(e),
                "names_the_cause": one_group_failure(e)["a message names the cause"]}
    return {"finished": True, "accuracy": results[0]["accuracy"], "errors": {}, "in_buffer_broadcast": False,
            "names_the_cause": False}


def forward_collectives(rank: int, world_size: int, grad_on: tuple[bool, ...] = (False, True, True),
                        after_join: bool = True) -> dict:
    """The diff's MoonsNet, which has no buffers, under DDP: one training forward and backward, then one
    forward through ``ddp_model`` per entry of ``grad_on`` (False: under ``torch.no_grad()``; True: with
    gradients on), as an evaluation would run them. Returns the c10d operators each ran, counted by
    ``CollectiveLog``: {"training step 1": {operator: count}, "forward 1, under torch.no_grad()": {...},
    "forward 2, with gradients on": {...}, ...}, {} for a forward that ran none. With ``after_join``, an
    empty ``Join`` block (not counted), then one more forward under ``torch.no_grad()``."""
    with process_group(rank, world_size) as device:
        torch.manual_seed(0)
        x, y = make_moons().tensors
        x, y = x.to(device), y.to(device)
        ddp_model = DDP(MoonsNet().to(device), device_ids=device_ids_for(device))
        log, phases = CollectiveLog(), ["training step 1"]
        with log:  # counts each collective run inside, under the label in log.phase
            log.phase = phases[0]
            nn.functional.cross_entropy(ddp_model(x[:32]), y[:32]).backward()
            for n, on in enumerate(grad_on, 1):
                log.phase = f"forward {n}, " + ("with gradients on" if on else "under torch.no_grad()")
                phases.append(log.phase)
                with torch.set_grad_enabled(on):
                    ddp_model(x)  # an evaluation through the wrapper
            if after_join:
                log.phase = "Join's exit"  # not returned
                with Join([ddp_model]):
                    pass  # an epoch's loop would run here
                log.phase = "after a Join block, under torch.no_grad()"
                phases.append(log.phase)
                with torch.no_grad():
                    ddp_model(x)  # an evaluation after Join
        return {phase: log.counts.get(phase, {}) for phase in phases}


# gloo words a peer that has gone "connection closed", "reset by peer" or "Read error", by timing.
_PEER_LOST = re.compile(r"closed|reset|read error", re.IGNORECASE)


def run_uneven_without_join() -> dict:
    """Run ``uneven_batches`` (rank r has 2 + 2r batches) on 2 ranks without ``Join``.

    Returns {"failed_rank" (the rank whose error the job reports), "error" (the first line of its error),
    "lost" (its message says its connection to a peer closed, was reset or could not be read: the
    peer has left)}; {"failed_rank": None, ...} if the job finished."""
    try:
        run_ranks(uneven_batches, 2, kwargs=dict(use_join=False), show_output=False)
    except WorkerError as e:
        return {"failed_rank": e.rank, "error": error_lines(e)[e.rank], "lost": bool(_PEER_LOST.search(e.message))}
    return {"failed_rank": None, "error": "", "lost": False}


def error_lines(error) -> dict[int, str]:
    """Each failed rank's real error from a ``WorkerError``: the first line of its message, without gloo's
    peer address (``[127.0.0.1]:port``, which changes from run to run) and the advice gloo adds after it."""
    lines = {}
    for rank, line in sorted(error.failures.items()):
        line = re.sub(r" ?\[[0-9a-fA-F.:]+\]:\d+", "", line.splitlines()[0])
        lines[rank] = line.split(". This is typically")[0]
    return lines


_TEMPLATE_KEEP = (
    "device = setup_job", "try:", "torch.manual_seed", "train_set, eval_set = make_datasets", "model = make_model",
    "sampler = DistributedSampler", "loader = DataLoader", "optimizer = make_optimizer", "loss_fn = make_loss",
    "start_epoch, history = load_checkpoint", "ddp_model = DDP", "for epoch in", "sampler.set_epoch",
    "totals = torch.zeros", "for x, y in loader", "x, y = x.to(device)", "loss = loss_fn",
    "loss.backward()", "optimizer.step()", "optimizer.zero_grad()", "totals[",
    "dist.all_reduce(totals)", "metric, evaluated = evaluate", "if rank == 0:",
    "save_checkpoint(", "dist.barrier()", "return {", "finally:", "dist.destroy_process_group()")
_DDP_MARKS = ("setup_job(", "seed + rank", "DistributedSampler(", "sampler=sampler", ".to(device)", "load_checkpoint(",
              "DDP(", "set_epoch", "no_sync", "ddp_model(x)", "dist.", "evaluate(", "rank == 0", "save_checkpoint(",
              "device=device")


_TEMPLATE_COMMENTED = ("torch.manual_seed(seed)", "torch.manual_seed(seed + rank)")  # why each seed, before each
# At --accumulate 1: the lines the view leaves out (a block header's block moves out by one level) and two
# lines written as they then act.
_AT_ACCUMULATE_1_DROP = ("first = ", "batches = ", "step_now = ", "with contextlib", "if step_now:")
_AT_ACCUMULATE_1_PLAIN = {"for i, (x, y) in enumerate(loader):": "for x, y in loader:  # simplified",
                          "(loss / batches).backward()": "loss.backward()  # simplified"}


def template_core_view() -> str:
    """``template.train_job``'s source at the default ``--accumulate 1``, trimmed to the four ``make_...``
    calls and the lines DDP adds around them, each of those marked ``>>``; ``...`` stands for the lines
    left out, comments dropped but those above the two ``torch.manual_seed`` lines. At ``--accumulate 1``
    the ``with`` line is a plain block, ``if step_now:`` always holds and ``batches`` is 1, so the view
    drops those lines, moves their blocks out by one level and writes the two lines that use them plainly,
    each with the comment ``# simplified``: they are not the file's text."""
    source = inspect.getsource(template.train_job)
    view, gap, comments = [], None, []  # gap: the indent of the lines left out since the last line shown
    dropped = []  # the indents of the block headers left out, whose blocks move out by one level
    for line in source[source.index("    device = setup_job"):].splitlines():
        code = line.split("  # ")[0].rstrip()  # without its comment
        indent = len(code) - len(code.lstrip())
        if line.lstrip().startswith("#"):
            comments.append(line.rstrip())
            continue
        if code.strip():
            while dropped and indent <= dropped[-1]:  # that block has ended
                dropped.pop()
        shift = 4 * len(dropped)
        if code.lstrip().startswith(_AT_ACCUMULATE_1_DROP):
            if code.endswith(":"):
                dropped.append(indent)
            comments = []
            continue
        code = code[shift:]
        code = code[:len(code) - len(code.lstrip())] + _AT_ACCUMULATE_1_PLAIN.get(code.strip(), code.strip())
        if code.lstrip().startswith(_TEMPLATE_KEEP):
            if gap is not None:
                view.append("   " + " " * gap + "...")
            if code.strip() in _TEMPLATE_COMMENTED:  # the comments the trimmed view keeps
                view.extend("   " + c for c in comments)
            view.append((">> " if any(m in code for m in _DDP_MARKS) else "   ") + code)
            gap = None
        elif code.strip() and gap is None:
            gap = indent - shift
        comments = []
    return "\n".join(view)


def template_with_crash(rank: int, world_size: int, crash_epoch: int = 3, crash_rank: int = 1, **job) -> dict:
    """The template's ``train_job`` with its ``make_optimizer`` wrapped: on ``crash_rank``, the first
    optimizer step of epoch ``crash_epoch`` raises RuntimeError, so the epochs before it are in
    ``last.pt``. ``job``: ``train_job``'s keywords; the epochs are counted from the job's start, so give
    a ``checkpoint_dir`` with no checkpoint in it."""
    from ddp_lib.workers import template

    make_optimizer = template.make_optimizer
    train_set, _ = template.make_datasets()
    per_rank = -(-len(train_set) // world_size)  # DistributedSampler pads to a multiple of world_size
    batches = -(-per_rank // job.get("batch_size", 32))
    steps_before = (crash_epoch - 1) * -(-batches // job.get("accumulate", 1))  # optimizer steps of the earlier epochs

    def crashing_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
        optimizer = make_optimizer(model, lr)
        if rank != crash_rank:
            return optimizer
        step, done = optimizer.step, [0]

        def step_or_crash(*args, **kwargs):
            if done[0] == steps_before:
                raise RuntimeError(f"injected failure at epoch {crash_epoch} on rank {rank}")
            done[0] += 1
            return step(*args, **kwargs)

        optimizer.step = step_or_crash
        return optimizer

    template.make_optimizer = crashing_optimizer
    try:
        return template.train_job(rank, world_size, **job)
    finally:
        template.make_optimizer = make_optimizer


# torchrun's own log lines start "W1206 10:23:26.123456 4242 .../run.py:874] ": a level, a time and a process id
_TORCHRUN_LOG = re.compile(r"[IWE]\d{4} [^\]]*\] ")


def _command_env(command: str) -> dict[str, str]:
    """The environment :func:`run_commands_at_once` gives ``command``: this interpreter's directory first on
    ``PATH``, and for a ``python ...`` command a free ``MASTER_PORT``."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if shlex.split(command)[0] == "python":
        env["MASTER_PORT"] = str(free_port())
    return env


def _shown(output: str, returncode: int) -> str:
    """A command's output as :func:`run_commands_at_once` prints it: torchrun's log lines left out, but for its
    ``OMP_NUM_THREADS`` warning, and the exit code added if not 0."""
    lines = []
    for line in output.splitlines():
        logged = _TORCHRUN_LOG.match(line)
        if not logged:
            lines.append(line)
        elif "OMP_NUM_THREADS" in line:
            lines.append("torchrun's warning: " + line[logged.end():].strip())
    if returncode:
        lines.append(f"(exit code {returncode})")
    return "\n".join(lines)


def run_commands_at_once(directories: list[str], commands: list[str], timeout_s: float = 300.0) -> list[str]:
    """Run ``commands[i]`` in ``directories[i]``, all at the same time, as typed in a terminal there. Each
    job's ranks import torch while the others' do, so the jobs take less time together than one after the
    other. Say so at once; once all have ended, print for each, in the commands' order,
    ``$ cd <folder's name> && command`` and what it printed (stdout and stderr together), with its exit
    code if not 0.

    The only change to the output: torchrun's own log lines, which carry a time and a process id, are
    left out, but for its ``OMP_NUM_THREADS`` warning, printed as "torchrun's warning: ..." without them.
    ``python`` and ``torchrun`` are this interpreter's (its directory first on ``PATH``). A ``python ...``
    command also gets a free ``MASTER_PORT`` (a job may still hold the template's 12355), and nothing
    else: no ``OMP_NUM_THREADS``, as in a terminal, so the template shares the cores among its ranks
    itself under mp.spawn. A job still running ``timeout_s`` seconds after the start is killed with
    its ranks (each job runs in a session of its own), and so are the others; then ``TimeoutError``
    names it. Returns each command's output as printed, one string per command."""
    if len(directories) != len(commands):
        raise ValueError(f"{len(directories)} folders for {len(commands)} commands: give one folder per command")
    print(f"{len(commands)} jobs starting at once; each one's output follows once all have ended ...", flush=True)
    jobs = [subprocess.Popen(shlex.split(command), cwd=directory, env=_command_env(command), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            for directory, command in zip(directories, commands)]
    deadline = time.monotonic() + timeout_s
    outputs = []
    try:
        for command, job in zip(commands, jobs):
            try:
                outputs.append(job.communicate(timeout=max(deadline - time.monotonic(), 0))[0])
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{command!r} still running after {timeout_s:g} s: stopped it and "
                                   f"the other jobs") from None
    finally:
        for job in jobs:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)  # the job's ranks too: they share its session
                job.communicate()
    shown = []
    for directory, command, job, output in zip(directories, commands, jobs, outputs):
        shown.append(_shown(output, job.returncode))
        print(f"$ cd {os.path.basename(directory)} && {command}", flush=True)
        if shown[-1]:
            print(shown[-1], flush=True)
    return shown


def warmup_rates(rank: int, world_size: int, lr: float, warmup_steps: int) -> list[float]:
    """The learning rate before each of the first ``warmup_steps + 1`` optimizer steps under the template's
    warm-up (:func:`ddp_lib.workers.template.with_warmup`: torch's ``LinearLR``), read from a real SGD
    optimizer and stepped as the template steps it: ``optimizer.step()`` then ``scheduler.step()``."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    scheduler = template.with_warmup(optimizer, None, warmup_steps)
    rates = []
    for _ in range(warmup_steps + 1):
        rates.append(round(optimizer.param_groups[0]["lr"], 4))
        optimizer.step()
        scheduler.step()
    return rates
