"""Checkers for lesson 04's exercises: ``average_gradients(model)`` leaves each .grad's mean over the
ranks (exercise 1, on real ranks); ``accumulate_step(ddp_model, optimizer, micro_batches)`` steps once
with one all-reduce (exercise 2, on real ranks); ``unreached_parameters(output, parameters)`` names the
parameters a backward from ``output`` would not reach (exercise 3, in this process: it needs no ranks)."""

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import (
    MISSING_WAIT,
    Report,
    check_on_ranks,
    counting_collectives,
    load_worker,
    worker_name,
)
from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.gradients import TwoHeads, c10d_ops, make_mlp, single_process_run
from ddp_lib.workers.shared import LR, flat_params, rank_batch

ATOL = 1e-6


def _grads(model) -> dict[str, torch.Tensor | None]:
    return {n: None if p.grad is None else p.grad.detach().cpu().clone() for n, p in model.named_parameters()}


def _run_learner(rank: int, world_size: int, target: str) -> dict:
    """In each rank: its own gradients for a batch of its own, and the .grads the learner's function left."""
    with process_group(rank, world_size) as device:
        torch.seed()  # a batch of this rank's own, fresh on every check (make_mlp seeds the generator after)
        x, y = torch.randn(4, 8).to(device), torch.randn(4, 4).to(device)
        model = make_mlp(0).to(device)  # the same weights on every rank, as after DDP's broadcast
        nn.functional.mse_loss(model(x), y).backward()
        own = _grads(model)
        with counting_collectives() as calls:
            load_worker(target)(model)
        torch.distributed.barrier()  # an unwaited all-reduce must not race with the read below
        late = [call["name"] for call in calls if call["async_op"] and not call["waited"]]
        return {"own": own, "called": [call["name"] for call in calls], "late": late, "grads": _grads(model)}


def diagnose(results: list[dict]) -> str | None:
    """The mistake the ranks' gradients show, named with its fix (None: every .grad is the mean)."""
    world_size, called = len(results), list(dict.fromkeys(name for r in results for name in r["called"]))
    mean = {n: sum(r["own"][n] for r in results) / world_size for n in results[0]["own"]}
    wrong = [(r, n) for r in results for n in mean if not _close(r["grads"][n], mean[n])]  # (a rank's results, name)
    if late := next((r["late"][0] for r in results if r["late"]), None):
        return MISSING_WAIT.format(late)
    if not wrong:
        return None
    if len(wrong) == world_size * len(mean) and all(_close(r["grads"][n], r["own"][n]) for r, n in wrong):
        if not called:
            return "the gradients are unchanged and no collective ran: a rank has only its own; all_reduce them"
        return (f"{' and '.join(called)} ran, but every .grad is unchanged: collectives work in place on the "
                "tensor passed, and p.grad / world_size is a new tensor; divide p.grad in place "
                "(p.grad /= world_size), then dist.all_reduce(p.grad)")
    for k in range(1, 9):  # the sum divided by k: world_size * the mean when k is 1
        if k != world_size and all(_close(r["grads"][n], mean[n] * world_size / k) for r, n in wrong):
            return (f"every gradient is {world_size} times the mean: all_reduce sums, so divide by world_size"
                    if k == 1 else f"on {world_size} ranks every gradient is the sum divided by {k}, a constant: "
                    "divide by dist.get_world_size()")
    bad = [rank for rank, r in enumerate(results) if any(r is w for w, _ in wrong)]
    return (f"on rank(s) {bad} these .grads do not hold the mean: {', '.join(dict.fromkeys(n for _, n in wrong))}; "
            "every rank needs it: dist.all_reduce each p.grad in place and divide it by world_size")


def _close(a: torch.Tensor | None, b: torch.Tensor) -> bool:
    return a is not None and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def check_average_gradients(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90):
    """A report on ``fn(model)`` after backward on each world size; stops at the first that fails."""
    return check_on_ranks(_run_learner, world_sizes, diagnose, (worker_name(fn),), stop=True, timeout=timeout,
                          passed=lambda runs: f"on every rank, all {len(runs[0]['grads'])} gradients are the mean "
                          f"over the ranks (within {ATOL:g})")


ACCUMULATE_STEPS, MICRO_BATCHES, MICRO_ROWS = 2, 2, 2  # optimizer steps checked; micro-batches per step; rows each


def _run_accumulate(rank: int, world_size: int, target: str) -> dict:
    """In each rank: two calls of the learner's ``accumulate_step`` on a DDP model with SGD, each on this
    rank's rows of one global batch, split into micro-batches; the parameters and all-reduces after each."""
    from torch.profiler import ProfilerActivity, profile

    with process_group(rank, world_size) as device:
        ddp_model = wrap_ddp(make_mlp(0).to(device), device)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=LR)
        accumulate_step, params, allreduces = load_worker(target), [flat_params(ddp_model)], []
        for step in range(ACCUMULATE_STEPS):
            x, y = (t.to(device) for t in rank_batch(step, rank, world_size, MICRO_BATCHES * MICRO_ROWS))
            micro_batches = list(zip(x.split(MICRO_ROWS), y.split(MICRO_ROWS), strict=True))
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                accumulate_step(ddp_model, optimizer, micro_batches)
            allreduces.append(c10d_ops(prof).get("allreduce_", 0))
            params.append(flat_params(ddp_model))
        return {"params": params, "allreduces": allreduces}


def diagnose_accumulate(results: list[dict]) -> str | None:
    """The mistake the ranks' all-reduces and parameters show, named with its fix (None: right)."""
    k, start = MICRO_BATCHES, results[0]["params"][0]
    batch = len(results) * k * MICRO_ROWS
    want = [single_process_run(batch, steps=s)["params"] for s in range(1, ACCUMULATE_STEPS + 1)]
    allreduces = results[0]["allreduces"][0]
    if allreduces == 0:
        return ("no all-reduce ran, so each rank kept its own gradient: run the last micro-batch outside "
                "no_sync(), so that its backward averages the sum")
    if allreduces == k:
        return (f"each of the {k} micro-batches was all-reduced: run the forward inside no_sync() too, as "
                "DDP decides at the forward whether the coming backward synchronises")
    if allreduces != 1:
        return f"{allreduces} all-reduces ran for {k} micro-batches: one is enough, in the last micro-batch's backward"
    first = [r["params"][1] for r in results]
    if all(torch.equal(p, start) for p in first):
        return "the parameters did not change: call optimizer.step() once, after the last micro-batch"
    moved, want_moved = first[0] - start, want[0] - start
    if torch.allclose(moved, want_moved * k, atol=ATOL):
        return (f"the step is {k} times too large: divide each micro-batch's loss by the number of "
                f"micro-batches ({k}), so that the sum of their gradients is a mean")
    if not all(torch.allclose(p, want[0], atol=ATOL) for p in first):
        return ("after the first call the parameters differ from one process on the whole batch: call "
                "optimizer.step() once, after the last micro-batch's backward")
    if not all(torch.allclose(r["params"][2], want[1], atol=ATOL) for r in results):
        return ("the first step is right, the second is not: its gradients still hold the first step's; "
                "call optimizer.zero_grad() after optimizer.step() (or before the first micro-batch)")
    return None


def check_accumulate_step(fn: Callable, world_sizes: tuple[int, ...] = (2,), timeout: float = 90) -> Report:
    """A report on ``fn(ddp_model, optimizer, micro_batches)``: two optimizer steps on each world size."""
    return check_on_ranks(_run_accumulate, world_sizes, diagnose_accumulate, (worker_name(fn),), stop=True,
                          timeout=timeout, passed=f"one all-reduce per step, and after {ACCUMULATE_STEPS} steps "
                          f"the parameters equal one process on the whole batch (within {ATOL:g})")


class _DetachedHead(TwoHeads):
    """Both heads run in the forward, but head ``b``'s output is detached: no gradient reaches it."""

    def forward(self, x: torch.Tensor, use_b: bool = True) -> torch.Tensor:
        h = torch.tanh(self.trunk(x))
        return self.a(h) + self.b(h).detach()


def _unreached_cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    """(what the case is, a model, its output): each a forward whose backward has not run."""
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    two_heads, detached, mlp = TwoHeads(), _DetachedHead(), make_mlp(0)
    return [("TwoHeads, head b unused", two_heads, two_heads(x, use_b=False)),
            ("TwoHeads, both heads used", two_heads, two_heads(x, use_b=True)),
            ("head b's output detached", detached, detached(x)),
            ("an MLP of three layers, every one used", mlp, mlp(x))]


def _reached(output: torch.Tensor) -> set[int]:
    """The ids of the parameters a backward from ``output`` reaches: its graph's AccumulateGrad nodes."""
    reached, stack, seen = set(), [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            reached.add(id(node.variable))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return reached


def _names(model: nn.Module, ids: set[int]) -> str:
    return ", ".join(n for n, p in model.named_parameters() if id(p) in ids) or "none"


def _judge_unreached(model: nn.Module, output: torch.Tensor, answer: object) -> str | None:
    """What is wrong with ``answer`` for this case, with its fix (None: right)."""
    every, reached = {id(p) for p in model.parameters()}, _reached(output)
    expected = every - reached
    try:
        items = list(answer)
    except TypeError:
        return f"it returned {type(answer).__name__}: return a list (or set) of the parameters not reached"
    if not all(isinstance(t, torch.Tensor) for t in items):
        kinds = sorted({type(t).__name__ for t in items if not isinstance(t, torch.Tensor)})
        return f"it returned {', '.join(kinds)} items: return the parameter tensors themselves, not names or ids"
    got = {id(t) for t in items}
    if got == expected:
        return None
    if got - every:
        return "it returned tensors that are not the model's parameters (copies?): return those passed in"
    if got == every:
        return ("it returned every parameter: before backward every .grad is None, so .grad cannot tell; "
                "walk the graph from output.grad_fn through next_functions instead")
    if got == reached:
        return "it returned the parameters reached: return the others, those NOT reached"
    if got > expected:
        return (f"{_names(model, got - expected)} are reached through earlier nodes: keep walking the "
                "next_functions of every node you meet, not only those of output.grad_fn")
    return f"expected {_names(model, expected)}; got {_names(model, got)}"


# What `p in a_list_of_tensors` raises: `in` compares with ==, value by value, and asks bool() of the result.
_TENSOR_IN_LIST_ERRORS = ("must match the size", "more than one value is ambiguous")


def _raised_hint(e: Exception) -> str:
    """The fix for an error that names a common mistake ("" when none fits)."""
    if isinstance(e, AttributeError) and "NoneType" in str(e):
        return "; next_functions holds (None, 0) where an input needs no gradient: skip a None node"
    if isinstance(e, RuntimeError) and any(m in str(e) for m in _TENSOR_IN_LIST_ERRORS):
        return ("; `p in a_list` compares tensors with ==, value by value: compare parameters by identity, "
                "with a set of id(node.variable), or a set of the tensors themselves (hashed by identity)")
    return ""


def check_unreached_parameters(fn: Callable) -> Report:
    """A report on ``fn(output, parameters)``: one line per case, each a forward whose backward has not run."""
    report = Report()
    for case, model, output in _unreached_cases():
        try:
            problem = _judge_unreached(model, output, fn(output, list(model.parameters())))
        except Exception as e:  # the learner's code: any error is reported, with a hint where one fits
            report.fail(f"{case}: it raised {type(e).__name__}: {e}{_raised_hint(e)}")
            continue
        if problem:
            report.fail(f"{case}: {problem}")
        else:
            report.ok(f"{case}: not reached: {_names(model, {id(p) for p in model.parameters()} - _reached(output))}")
    return report
