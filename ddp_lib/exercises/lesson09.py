"""Checkers for lesson 09's exercises: an exact ``evaluate`` although the sampler pads, ``train_step``, and
``scaled_step``, the order of a GradScaler's calls."""

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler, TensorDataset

from ddp_lib.exercises.checking import Report, as_number, check_on_ranks
from ddp_lib.process_group import process_group
from ddp_lib.workers.training_loop import LoopNet, make_moons

WORLD_SIZES = (2, 3)
EVAL_SIZES = (11, 7)  # multiples of neither 2 nor 3: the sampler pads both
DRAWS, TOL = 4, 1e-5  # draws per size: on one small draw a mistake can give the exact value by chance


def _run_evaluate(rank: int, world_size: int, evaluate: Callable) -> list[dict]:
    """In each rank, per held-out set drawn here: the learner's value, and (correct, counted) per way of counting."""
    with process_group(rank, world_size):
        found = []
        for draw, n in enumerate(EVAL_SIZES * DRAWS):
            torch.manual_seed(0)
            model = LoopNet()  # the same weights on every rank
            g = torch.Generator().manual_seed(1000 * rank + draw)  # fixed draws: the report reads the same each run
            x, y = torch.randn(n, 2, generator=g), torch.randint(0, 2, (n,), generator=g)
            with torch.no_grad():
                right = (model(x).argmax(1) == y).double()
            padded = list(DistributedSampler(range(n), world_size, rank, shuffle=False))
            ways = {"real": padded[:len(range(rank, n, world_size))], "padded": padded,  # the rest is padding
                    "drop_last": list(DistributedSampler(range(n), world_size, rank, False, drop_last=True))}
            found.append({"value": as_number(evaluate(model, TensorDataset(x, y), rank, world_size)),
                          **{way: (right[picked].sum().item(), len(picked)) for way, picked in ways.items()}})
        return found


AVERAGED = ("is the mean of the ranks' accuracies", "shards differ in size, so all_reduce the correct and counted "
            "samples and divide once")
# (way of counting, per rank's accuracy averaged, what the value is, its fix): the usual mistakes.
EVAL_MISTAKES = (("padded", False, "counts the padding duplicate(s) DistributedSampler adds",
                  "skip the positions at or past len(dataset)"), ("real", True, *AVERAGED), ("padded", True, *AVERAGED),
                 ("drop_last", False, "leaves out the samples drop_last=True drops", "count every sample once"))


def _accuracy(rows: tuple[dict, ...], way: str, averaged: bool = False) -> float:
    """One held-out set's accuracy counted ``way``; ``averaged``: the mean of the ranks' accuracies."""
    correct, counted = zip(*(row[way] for row in rows))
    return sum(c / n for c, n in zip(correct, counted)) / len(rows) if averaged else sum(correct) / sum(counted)


def diagnose_evaluate(runs: list[list[dict]]) -> str | None:
    """The mistake the held-out sets show: ranks that disagree, else the one mistake that explains every wrong value."""
    if bad := next((row["value"] for rows in runs for row in rows if isinstance(row["value"], str)), None):
        return f"evaluate returned {bad}; return the accuracy as a float"
    draws = list(zip(*runs))  # per held-out set, every rank's row
    if apart := next((rows for rows in draws if any(abs(r["value"] - rows[0]["value"]) > TOL for r in rows)), None):
        return (f"the ranks returned different accuracies {[round(r['value'], 4) for r in apart]}: all_reduce the "
                "correct and counted samples")
    if not (wrong := [rows for rows in draws if abs(rows[0]["value"] - _accuracy(rows, "real")) >= TOL]):
        return None
    value, exact = wrong[0][0]["value"], _accuracy(wrong[0], "real")
    # By chance one draw can match another mistake: the one said must match them all.
    return next((f"{value:.4f} {meaning} (exact: {exact:.4f}); {fix}" for way, averaged, meaning, fix in EVAL_MISTAKES
                 if all(abs(rows[0]["value"] - _accuracy(rows, way, averaged)) < TOL for rows in wrong)),
                f"returned {value:.4f}, the accuracy over all samples is {exact:.4f}: all_reduce the counts")


def check_evaluate(evaluate: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES):
    """A report on the learner's ``evaluate`` on each world size, for held-out sets of 11 and 7 samples."""
    passed = f"every rank returns the exact accuracy, padding or not ({', '.join(map(str, EVAL_SIZES))} samples)"
    return check_on_ranks(_run_evaluate, world_sizes, diagnose_evaluate, (evaluate,), passed, stop=True, timeout=120)


# Exercise 2: a step with gradient accumulation and clipping.
STEPS, MICRO_BATCHES, MICRO_BATCH_SIZE, LR = 3, 2, 8, 0.5
# max_norm per step: far below any gradient norm of this model (a missing clip, or clipping inside
# the loop, changes the result), far above it (an undivided loss is twice the gradient), in between.
MAX_NORMS = (0.05, 100.0, 0.5)
STEP_FIX = ("divide the loss by the number of micro-batches, clip once, after the last micro-batch's backward, "
            "with clip_grad_norm_(..., max_norm), then step")


def reference_params(picks: torch.Tensor) -> torch.Tensor:
    """The parameters after STEPS steps of one process on the global batch: every rank's micro-batches at once."""
    x, y = make_moons().tensors
    torch.manual_seed(0)
    model = LoopNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step, max_norm in enumerate(MAX_NORMS):
        batch = picks[:, step].flatten()  # micro-batches of one size: the mean over all their samples
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run_train_step(rank: int, world_size: int, train_step: Callable, picks: torch.Tensor) -> dict:
    """In each rank: the parameters after the learner's steps, DDP's all-reduces, no_sync's use, and the forwards."""
    with process_group(rank, world_size):
        torch.manual_seed(0)
        model = LoopNet()
        ddp_model = DDP(model)
        counted = {"all_reduces": 0, "no_syncs": 0, "forwards": []}
        ddp_model.register_comm_hook(counted, lambda state, bucket: state.update(  # DDP's own all-reduce, counted
            all_reduces=state["all_reduces"] + 1) or default_hooks.allreduce_hook(None, bucket))
        # DDP decides in the forward whether the backward all-reduces.
        model.register_forward_pre_hook(lambda _module, inputs: counted["forwards"].append(
            (len(inputs[0]), not ddp_model.require_backward_grad_sync)))
        ddp_model.no_sync = lambda enter=ddp_model.no_sync: counted.update(no_syncs=1) or enter()  # its use noted
        optimizer, (x, y) = torch.optim.SGD(model.parameters(), lr=LR), make_moons().tensors
        for step in range(STEPS):
            optimizer.zero_grad()
            train_step(ddp_model, optimizer, [(x[p], y[p]) for p in picks[rank, step]], MAX_NORMS[step])
        return {"params": torch.cat([p.detach().flatten() for p in model.parameters()]), **counted}


def diagnose_train_step(results: list[dict], picks: torch.Tensor) -> list[str]:
    """Problems with per-rank results of ``_run_train_step`` on ``picks`` (empty: all right)."""
    params, first = [r["params"] for r in results], results[0]
    if apart := [rank for rank, p in enumerate(params) if not torch.allclose(p, params[0], atol=TOL)]:
        gap = max((params[rank] - params[0]).abs().max().item() for rank in apart)
        return [f"the parameters of rank(s) {', '.join(map(str, apart))} differ from rank 0's (by up to {gap:.2g}): "
                "run the last micro-batch through ddp_model, outside no_sync, so that DDP all-reduces"]
    problems = []
    if (largest := max((size for size, _ in first["forwards"]), default=0)) > MICRO_BATCH_SIZE:
        problems.append(f"the model ran a forward on {largest} samples at once, but a micro-batch holds "
                        f"{MICRO_BATCH_SIZE}: run one forward and backward per micro-batch")
    if not torch.allclose(params[0], reference_params(picks), atol=TOL):
        problems.append(f"the parameters differ from one process on the global batch: {STEP_FIX}")
    if first["all_reduces"] != STEPS:  # this model fits in one bucket: one all-reduce per step
        said = (f"DDP all-reduced {first['all_reduces']} times in {STEPS} steps, expected {STEPS} "
                "(one per bucket per step, and this model fits in one bucket): ")
        forward_outside = first["no_syncs"] and not any(inside for _, inside in first["forwards"])
        problems.append(said + ("no_sync was entered, but no forward ran inside it; put the forward inside no_sync "
                                "too: DDP decides in the forward" if forward_outside else
                                "run every micro-batch but the last inside ddp_model.no_sync()"))
    return problems


def check_train_step(train_step: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES):
    """A report on the learner's ``train_step`` for 3 steps of 2 micro-batches on each world size."""
    # picks[size][rank, step, k]: the indices of a micro-batch of training samples, drawn now
    picks = {size: torch.randperm(len(make_moons()), generator=torch.Generator().manual_seed(size))[
        :size * STEPS * MICRO_BATCHES * MICRO_BATCH_SIZE].view(size, STEPS, MICRO_BATCHES, -1) for size in world_sizes}
    return check_on_ranks(_run_train_step, world_sizes, lambda runs: diagnose_train_step(runs, picks[len(runs)]),
                          lambda size: (train_step, picks[size]), stop=True, timeout=120,
                          passed="the parameters equal one process on the global batch, with one all-reduce per step "
                                 "(this model fits in one bucket)")


# Exercise 3: one process, no DDP (the order of the scaler's calls is the same under DDP).
SCALE, SCALED_LR, SCALED_MAX_NORM = 1024.0, 0.1, 1.0
SCALED_ORDER = ("scaler.scale(loss).backward(), scaler.unscale_(optimizer), clip_grad_norm_(model.parameters(), "
                "max_norm), scaler.step(optimizer), scaler.update()")


def _scaled_steps(scaled_step: Callable) -> dict:
    """Two steps of ``scaled_step`` on a small model: one whose gradients overflow, then a clean one.
    Returns {"after_overflow": (parameters, scale), "after_clean": (parameters, scale)}, or {"error": text}."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=SCALED_LR)
    scaler = torch.amp.GradScaler("cpu", init_scale=SCALE)
    x, y = torch.randn(8, 4), torch.full((8, 1), 10.0)  # far from the target: a gradient norm far above 1

    def params() -> torch.Tensor:
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    result = {}
    for name, factor in (("after_overflow", math.inf), ("after_clean", 1.0)):  # an inf loss: every gradient inf
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y) * factor
        try:
            scaled_step(loss, model, optimizer, scaler, SCALED_MAX_NORM)
        except Exception as exc:  # a learner's mistake can raise anything; report it
            return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", "at": name}
        result[name] = (params(), scaler.get_scale())
    return result


def _right(loss, model, optimizer, scaler, max_norm):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def _clip_scaled(loss, model, optimizer, scaler, max_norm):  # clips before unscaling
    scaler.scale(loss).backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def _not_clipped(loss, model, optimizer, scaler, max_norm):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def _loss_not_scaled(loss, model, optimizer, scaler, max_norm):
    loss.backward()
    _after_backward(model, optimizer, scaler, max_norm)


def _after_backward(model, optimizer, scaler, max_norm):
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


# A step that differs from the right one: what the learner's weights match, and the fix.
SCALED_MISTAKES = (
    (_clip_scaled, "the step is about 1/scale of the right one: clip_grad_norm_ saw the scaled gradients. "
                   "Call scaler.unscale_(optimizer) before clip_grad_norm_"),
    (_not_clipped, "the step is the unclipped one: call clip_grad_norm_(model.parameters(), max_norm) after "
                   "scaler.unscale_(optimizer)"),
    (_loss_not_scaled, "the gradients were divided by the scale but never multiplied by it: backward on "
                       "scaler.scale(loss), not on loss"),
)


def diagnose_scaled_step(scaled_step: Callable) -> list[str]:
    """Problems with the learner's ``scaled_step`` (empty: all right)."""
    got, right = _scaled_steps(scaled_step), _scaled_steps(_right)
    start = _scaled_steps(lambda *args: None)["after_clean"][0]  # the parameters before any step
    if "error" in got:
        fix = (": call scaler.update() at the end of every step, and unscale_ once per step"
               if "already been called" in got["error"] else f"; the right order is {SCALED_ORDER}")
        return [f"the {got['at'].removeprefix('after_')} step raised {got['error']}{fix}"]
    problems = []
    weights, scale = got["after_overflow"]
    if not torch.equal(weights, start):
        problems.append("the step whose gradients overflowed changed the weights: step with "
                        "scaler.step(optimizer), which skips such a step, not optimizer.step()")
    elif scale != SCALE / 2:
        problems.append(f"the scale is {scale:g} after a step that overflowed, expected {SCALE / 2:g}: "
                        "call scaler.update() after scaler.step(optimizer)")
    if problems:
        return problems
    weights = got["after_clean"][0]
    if torch.allclose(weights, right["after_clean"][0], atol=1e-6):
        return []
    for mistake, fix in SCALED_MISTAKES:
        if torch.allclose(weights, _scaled_steps(mistake)["after_clean"][0], atol=1e-6):
            return [fix]
    return [f"the weights after the clean step differ from the right order's: {SCALED_ORDER}"]


def check_scaled_step(scaled_step: Callable) -> Report:
    """A report on the learner's ``scaled_step``: an overflowed step, then a clean one, on one process."""
    report = Report()
    if problems := diagnose_scaled_step(scaled_step):
        for problem in problems:
            report.fail(problem)
    else:
        report.ok("the overflowed step was skipped and halved the scale; the clean step unscaled, clipped "
                  "and stepped as the right order does")
    return report


# Exercise 4: the mean of the ranks' accuracies, as each rank's DistributedSampler(shuffle=False) splits the set.
# (samples, ranks) per held-out set: 11 on 4 as the exercise says, and others that pad or divide evenly.
MEAN_SIZES = ((11, 4), (7, 3), (10, 4), (5, 2), (9, 3))
MEAN_DRAWS = 6  # per size; drawn from a fixed seed, so that the report reads the same on every run


def _shards(n: int, world_size: int, **sampler) -> list[list[int]]:
    """Each rank's sample indices, as DistributedSampler(range(n), ..., shuffle=False, **sampler) gives them."""
    return [list(DistributedSampler(range(n), world_size, rank, shuffle=False, **sampler))
            for rank in range(world_size)]


def _blocks(n: int, world_size: int) -> list[list[int]]:
    """Consecutive blocks of ceil(n / world_size) samples, the last one shorter: not the sampler's split."""
    size = -(-n // world_size)
    return [list(range(n))[rank * size:(rank + 1) * size] for rank in range(world_size)]


def _mean(right: torch.Tensor, shards: list[list[int]]) -> float:
    return sum(right[shard].double().mean().item() for shard in shards) / len(shards)


# (what the learner's value matches, given (right, world_size), and its fix): the usual mistakes.
MEAN_MISTAKES = (
    (lambda right, ws: right.double().mean().item(), "you returned the exact accuracy over all samples; this exercise "
     "wants the mean of the ranks' accuracies: each rank's accuracy on its own shard, then the mean of those "
     "world_size numbers"),
    (lambda right, ws: _mean(right, [list(range(rank, len(right), ws)) for rank in range(ws)]),
     "it leaves out the padding: DistributedSampler repeats the first samples until every rank holds "
     "ceil(n / world_size); take each rank's indices from DistributedSampler(..., shuffle=False)"),
    (lambda right, ws: _mean(right, _shards(len(right), ws, drop_last=True)), "it drops the last samples: the "
     "sampler's default is drop_last=False, which pads instead"),
    (lambda right, ws: _mean(right, _blocks(len(right), ws)),
     "it splits the samples into consecutive blocks: DistributedSampler deals them out, rank r gets r, "
     "r + world_size, ... (then the padding)"),
)


def _mean_draws() -> list[tuple[torch.Tensor, int]]:
    """The held-out sets checked: per-sample correctness (1 right, 0 wrong) and a number of ranks."""
    g = torch.Generator().manual_seed(9)
    return [(torch.randint(0, 2, (n,), generator=g), ws) for n, ws in MEAN_SIZES for _ in range(MEAN_DRAWS)]


def check_rank_mean(rank_mean: Callable) -> Report:
    """A report on the learner's ``rank_mean(right, world_size)``: the mean of the ranks' accuracies."""
    report, draws = Report(), _mean_draws()
    try:
        got = [as_number(rank_mean(right.clone(), ws)) for right, ws in draws]
    except NotImplementedError as exc:
        report.fail(str(exc) or "rank_mean is not written yet")
        return report
    except Exception as exc:  # a learner's mistake can raise anything; report it
        report.fail(f"rank_mean raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return report
    if bad := next((value for value in got if isinstance(value, str)), None):
        report.fail(f"rank_mean returned {bad}; return the mean accuracy as a float")
        return report
    expected = [_mean(right, _shards(len(right), ws)) for right, ws in draws]
    if not (wrong := [i for i, (value, exact) in enumerate(zip(got, expected)) if abs(value - exact) >= TOL]):
        gap = max(abs(value - right.double().mean().item()) for value, (right, _) in zip(got, draws))
        report.ok(f"the mean of the ranks' accuracies, padding included, on {len(draws)} held-out sets; "
                  f"it was up to {gap:.3f} from the exact accuracy")
        return report
    right, ws = draws[wrong[0]]
    said = f"{len(right)} samples on {ws} ranks: returned {got[wrong[0]]:.4f}, expected {expected[wrong[0]]:.4f}"
    # By chance one draw can match another mistake: the one said must match every wrong draw.
    fix = next((fix for value_of, fix in MEAN_MISTAKES
                if all(abs(got[i] - value_of(*draws[i])) < TOL for i in wrong)),
               "compute each rank's accuracy on the indices DistributedSampler(range(n), world_size, rank, "
               "shuffle=False) gives it, then average the world_size accuracies")
    report.fail(f"{said}; {fix}")
    return report
