"""Checkers for lesson 09's exercises.

1. ``evaluate(model, dataset, rank, world_size) -> float``: the accuracy of ``model`` over every
   sample of ``dataset`` exactly once, the same on every rank, although ``DistributedSampler``
   pads the shards with duplicates.
2. ``train_step(ddp_model, optimizer, micro_batches, max_norm) -> None``: one optimizer step over
   a list of (x, y) micro-batches: gradients accumulated with one all-reduce per step
   (``no_sync``), the loss averaged over the micro-batches, the synchronised gradient clipped.

Each checker runs the learner's function on every rank, on 2 ranks and then on 3 (so that a
hard-coded world size fails), and compares with the exact answer, with inputs for which the classic
mistakes give another one: for ``evaluate``, each rank holds real samples only in its own shard
(drawn in that rank from fresh randomness, decoys elsewhere), so evaluating the whole set alone or
counting a padding duplicate reads decoys; for ``train_step``, micro-batches each rank draws from
fresh randomness (returned beside the answer, so that only the parent, which gets every rank's,
computes the reference), a ``max_norm`` per step that makes an undivided loss, a missing clip and
clipping inside the loop change the result, and a hook on the model that sees a forward on
concatenated micro-batches.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ddp_lib.exercises.checking import Report, run_on_ranks

# Each check runs on 2 ranks and then on 3: an answer that hard-codes the world size fails one.
WORLD_SIZES = (2, 3)
EVAL_SIZES = (11, 7)  # multiples of neither 2 nor 3: the sampler pads both
# Draws per size: with so few samples one draw can make a mistake give the exact value by chance
# (every prediction right, or two shards with equal accuracies); every draw must come out exact.
DRAWS = 4
TOL = 1e-5


def _run_evaluate(rank: int, world_size: int, evaluate: Callable) -> list[dict]:
    """In each rank: the learner's value, and this rank's (correct, counted) for each way of counting,
    for every size in EVAL_SIZES, DRAWS times. Samples and labels come from fresh randomness drawn in this rank,
    so no rank holds another rank's samples and nothing here holds the exact answer."""
    import secrets

    from torch.utils.data import DistributedSampler

    from ddp_lib.process_group import process_group
    from ddp_lib.workers.training_loop import LoopNet

    with process_group(rank, world_size):
        found = []
        for n_eval in [n for n in EVAL_SIZES for _ in range(DRAWS)]:
            torch.manual_seed(0)
            model = LoopNet()  # the same weights on every rank
            g = torch.Generator().manual_seed(secrets.randbits(63))
            x, y = torch.randn(n_eval, 2, generator=g), torch.randint(0, 2, (n_eval,), generator=g)
            with torch.no_grad():
                right = (model(x).argmax(1) == y).double()
            padded = list(DistributedSampler(range(n_eval), world_size, rank, shuffle=False))
            real = padded[:len(range(rank, n_eval, world_size))]  # positions past the end are padding
            dropped = list(DistributedSampler(range(n_eval), world_size, rank, shuffle=False, drop_last=True))
            value = evaluate(model, torch.utils.data.TensorDataset(x, y), rank, world_size)
            found.append({"n_eval": n_eval, "value": value if isinstance(value, (int, float)) else repr(value)[:60],
                          **{way: (right[picked].sum().item(), len(picked))
                             for way, picked in (("real", real), ("padded", padded), ("drop_last", dropped))}})
        return found


def _accuracy(rows: list[dict], way: str) -> float:
    """The accuracy from every rank's (correct, counted) for one way of counting."""
    return sum(row[way][0] for row in rows) / sum(row[way][1] for row in rows)


def _mean_of_accuracies(rows: list[dict], way: str) -> float:
    """The mean over ranks of each rank's own accuracy, for one way of counting (a classic mistake)."""
    return sum(row[way][0] / row[way][1] for row in rows) / len(rows)


def diagnose_evaluate(results: list[list[dict]]) -> list[str]:
    """Problems with per-rank results of ``_run_evaluate``, most telling first (empty: all right)."""
    found: dict[int, list[str]] = {}  # per size, the problem of each draw that has one
    for case in range(len(results[0])):
        rows = [per_rank[case] for per_rank in results]
        problems = found.setdefault(rows[0]["n_eval"], [])
        n_eval = rows[0]["n_eval"]
        values = [row["value"] for row in rows]
        if any(isinstance(v, str) for v in values):
            bad = next(v for v in values if isinstance(v, str))
            return [f"evaluate returned {bad}; return the accuracy as a float"]
        exact = _accuracy(rows, "real")
        if any(abs(v - values[0]) > TOL for v in values):
            local = all(abs(row["value"] - row["padded"][0] / row["padded"][1]) < TOL for row in rows)
            hint = ("; each is its own shard's: all_reduce the correct and counted samples" if local else
                    "; each rank sees only its own shard's samples: split with DistributedSampler(shuffle=False) "
                    "and all_reduce the counts")
            problems.append(f"{n_eval} samples: the ranks returned different accuracies "
                            f"{[round(v, 4) for v in values]}{hint}")
            continue
        value = values[0]
        if abs(value - exact) < TOL:
            continue
        if abs(value - _accuracy(rows, "padded")) < TOL:
            problems.append(f"{n_eval} samples: {value:.4f} counts the padding duplicate(s) DistributedSampler adds "
                            f"(exact: {exact:.4f}); skip the positions at or past len(dataset)")
        elif any(abs(value - _mean_of_accuracies(rows, way)) < TOL for way in ("real", "padded")):
            problems.append(f"{n_eval} samples: {value:.4f} is the mean of the ranks' accuracies (exact: {exact:.4f}); "
                            "shards differ in size, so all_reduce the correct and counted samples and divide once")
        elif abs(value - _accuracy(rows, "drop_last")) < TOL:
            problems.append(f"{n_eval} samples: {value:.4f} leaves out the samples drop_last=True drops "
                            f"(exact: {exact:.4f}); count every sample once")
        else:
            problems.append(f"{n_eval} samples: returned {value:.4f}, the accuracy over all samples is "
                            f"{exact:.4f}; each rank can read only its own shard (DistributedSampler, "
                            "shuffle=False): combine the counts with all_reduce")
    # one line per size: ranks that disagree is the most telling, whichever draw showed it
    return [next((p for p in problems if "different accuracies" in p), problems[0])
            for problems in found.values() if problems]


def _check(run: Callable, kwargs: dict, diagnose: Callable, passed: str, world_sizes: tuple[int, ...]) -> Report:
    """``run`` on every rank, on each of ``world_sizes`` in turn, judged by ``diagnose`` (a line per
    problem); ``passed`` says what a world size without one showed. Stops at the first that fails."""
    report = Report()
    for world_size in world_sizes:
        results = run_on_ranks(run, world_size, report, kwargs=kwargs, timeout=120)
        if results is None:
            return report
        problems = diagnose(results)
        for problem in problems:
            report.fail(f"world_size {world_size}: {problem}")
        if problems:
            return report
        report.ok(f"on {world_size} ranks {passed}")
    return report


def check_evaluate(evaluate: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES) -> Report:
    """Run the learner's ``evaluate(model, dataset, rank, world_size)`` on every rank, on each of
    ``world_sizes`` in turn, for held-out sets of 11 and 7 samples."""
    return _check(_run_evaluate, dict(evaluate=evaluate), diagnose_evaluate,
                  f"every rank returns the exact accuracy, padding or not ({', '.join(map(str, EVAL_SIZES))} "
                  "samples)", world_sizes)


# Exercise 2: a step with gradient accumulation and clipping.
STEPS, MICRO_BATCHES, MICRO_BATCH_SIZE, LR = 3, 2, 8, 0.5
# max_norm per step, each making one classic mistake change the result whatever the samples drawn:
# far below any gradient norm of this model (a missing clip, or clipping inside the accumulation
# loop, scales another gradient), far above it (an undivided loss is twice the gradient, unclipped),
# and in between.
MAX_NORMS = (0.05, 100.0, 0.5)

# One rank's micro-batches: batches[step][k] = (x, y).
Batches = list[list[tuple[torch.Tensor, torch.Tensor]]]


def draw_micro_batches(generator: torch.Generator) -> Batches:
    """STEPS x MICRO_BATCHES micro-batches of training samples picked at random by ``generator``.
    Each rank draws its own from fresh randomness, so no rank can know another rank's samples."""
    from ddp_lib.workers.training_loop import make_moons

    x, y = make_moons().tensors
    picks = torch.randperm(len(y), generator=generator)[:STEPS * MICRO_BATCHES * MICRO_BATCH_SIZE]
    picks = picks.view(STEPS, MICRO_BATCHES, MICRO_BATCH_SIZE)
    return [[(x[p], y[p]) for p in step] for step in picks]


def reference_params(batches: list[Batches], divide: bool | str = True, clip: bool = True) -> torch.Tensor:
    """One process over the global batch (``batches[rank]``, every rank's micro-batches): what the
    step must produce. ``divide``/``clip`` False give the results of the usual mistakes;
    ``divide="inside"`` clips after every micro-batch's backward (each rank its own partial sum until
    the last, as under no_sync)."""
    from ddp_lib.workers.training_loop import LoopNet

    torch.manual_seed(0)
    model = LoopNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        optimizer.zero_grad()
        if divide == "inside":
            _clip_inside_the_loop(model, [per_rank[step] for per_rank in batches], MAX_NORMS[step])
            optimizer.step()
            continue
        for k in range(MICRO_BATCHES):
            x = torch.cat([per_rank[step][k][0] for per_rank in batches])
            y = torch.cat([per_rank[step][k][1] for per_rank in batches])
            loss = nn.functional.cross_entropy(model(x), y)
            (loss / MICRO_BATCHES if divide else loss).backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), MAX_NORMS[step])
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _clip_inside_the_loop(model: nn.Module, step_batches: list[list[tuple[torch.Tensor, torch.Tensor]]],
                          max_norm: float) -> None:
    """The gradient of one step when every rank clips after each micro-batch's backward: each rank
    clips its own partial sum under no_sync, then the last backward averages and it is clipped again.
    ``step_batches[rank]`` holds that rank's micro-batches of the step."""
    import copy

    partial = []
    for micro_batches in step_batches:
        replica = copy.deepcopy(model)
        for x, y in micro_batches[:-1]:
            (nn.functional.cross_entropy(replica(x), y) / MICRO_BATCHES).backward()
            nn.utils.clip_grad_norm_(replica.parameters(), max_norm)
        partial.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in replica.parameters()])
    x = torch.cat([micro_batches[-1][0] for micro_batches in step_batches])
    y = torch.cat([micro_batches[-1][1] for micro_batches in step_batches])
    (nn.functional.cross_entropy(model(x), y) / MICRO_BATCHES).backward()  # the mean over ranks of the last
    for i, p in enumerate(model.parameters()):
        p.grad += sum(grads[i] for grads in partial) / len(step_batches)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def _counting_allreduce(state: dict, bucket):  # no annotations: DDP checks them, and here they are strings
    """DDP's averaging all-reduce, counted."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    state["all_reduces"] += 1
    return default_hooks.allreduce_hook(None, bucket)


def _run_train_step(rank: int, world_size: int, train_step: Callable) -> dict:
    """In each rank: the learner's steps on micro-batches this rank draws from fresh randomness;
    returns the parameters, the micro-batches (for the parent's reference) and what was counted."""
    import secrets

    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddp_lib.process_group import process_group
    from ddp_lib.workers.training_loop import LoopNet

    with process_group(rank, world_size):
        batches = draw_micro_batches(torch.Generator().manual_seed(secrets.randbits(63)))
        torch.manual_seed(0)
        model = LoopNet()
        ddp_model = DDP(model)
        state = {"all_reduces": 0}
        ddp_model.register_comm_hook(state, _counting_allreduce)
        batch_sizes: list[int] = []  # of every forward: accumulation runs one micro-batch at a time
        model.register_forward_pre_hook(lambda _module, inputs: batch_sizes.append(len(inputs[0])))
        # Whether each forward ran inside no_sync (DDP decides there whether the backward all-reduces),
        # and how often no_sync was entered at all.
        forwards_in_no_sync, no_syncs = [], [0]
        model.register_forward_pre_hook(
            lambda _module, _inputs: forwards_in_no_sync.append(not ddp_model.require_backward_grad_sync))
        no_sync = ddp_model.no_sync

        def counted_no_sync():
            no_syncs[0] += 1
            return no_sync()
        ddp_model.no_sync = counted_no_sync
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        for step in range(STEPS):
            optimizer.zero_grad()
            # clones: whatever the learner does to them, the parent gets the samples as drawn
            train_step(ddp_model, optimizer, [(x.clone(), y.clone()) for x, y in batches[step]], MAX_NORMS[step])
        return {"params": torch.cat([p.detach().flatten() for p in model.parameters()]), "batches": batches,
                "all_reduces": state["all_reduces"], "largest_batch": max(batch_sizes, default=0),
                "no_syncs": no_syncs[0], "forwards_in_no_sync": sum(forwards_in_no_sync)}


def diagnose_train_step(results: list[dict]) -> list[str]:
    """Problems with per-rank results of ``_run_train_step`` (empty: all right)."""
    params = [r["params"] for r in results]
    apart = [rank for rank, p in enumerate(params) if not torch.allclose(p, params[0], atol=TOL)]
    if apart:
        gap = max((params[rank] - params[0]).abs().max().item() for rank in apart)
        return [f"the parameters of rank(s) {', '.join(map(str, apart))} differ from rank 0's (by up to {gap:.2g}): "
                "every rank must step on the same, all-reduced gradient (is the last micro-batch's backward "
                "outside no_sync?)"]
    problems = []
    if results[0]["largest_batch"] > MICRO_BATCH_SIZE:
        problems.append(f"the model ran a forward on {results[0]['largest_batch']} samples at once, but a "
                        f"micro-batch holds {MICRO_BATCH_SIZE}: run one forward and backward per micro-batch "
                        "(the point of accumulating is that a whole batch need not fit in memory)")
    batches = [r["batches"] for r in results]
    if not torch.allclose(params[0], reference_params(batches), atol=TOL):
        for divide, clip, hint in (("inside", True, "clip once, after the last micro-batch's backward: inside the "
                                   "loop the first micro-batches' gradients are clipped alone, before they are summed"),
                                   (False, True, "divide each micro-batch's loss by the number of micro-batches"),
                                   (True, False, "clip with clip_grad_norm_(..., max_norm) after the last backward"),
                                   (False, False, "divide the loss by the number of micro-batches, and clip")):
            if torch.allclose(params[0], reference_params(batches, divide, clip), atol=TOL):
                problems.append(f"the parameters differ from one process on the global batch: {hint}")
                break
        else:
            problems.append("the parameters differ from one process on the global batch: accumulate every "
                            "micro-batch, divide the loss by their number, clip the synchronised gradient, step once")
    expected = STEPS  # this model fits in one bucket: one all-reduce per step
    if results[0]["all_reduces"] != expected and results[0]["no_syncs"] and not results[0]["forwards_in_no_sync"]:
        problems.append(f"DDP all-reduced {results[0]['all_reduces']} times in {STEPS} steps, expected {expected}: "
                        "no_sync was entered, but no forward ran inside it; put the forward inside no_sync too "
                        "(DDP decides during the forward whether the backward all-reduces)")
    elif results[0]["all_reduces"] != expected:
        problems.append(f"DDP all-reduced {results[0]['all_reduces']} times in {STEPS} steps, expected {expected}: "
                        "run every micro-batch but the last inside ddp_model.no_sync()")
    return problems


def check_train_step(train_step: Callable, world_sizes: tuple[int, ...] = WORLD_SIZES) -> Report:
    """Run the learner's ``train_step(ddp_model, optimizer, micro_batches, max_norm)`` for 3 steps of
    2 micro-batches on every rank, on each of ``world_sizes`` in turn."""
    return _check(_run_train_step, dict(train_step=train_step), diagnose_train_step,
                  "the parameters equal one process on the global batch, with one all-reduce per step", world_sizes)
