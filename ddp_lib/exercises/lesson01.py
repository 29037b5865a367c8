"""Checkers for lesson 01's exercises: ``mean_across_ranks(rank, world_size, x)``, the mean on every rank;
reduce's result trusted on dst only; a swap with ``batch_isend_irecv``; ``ring_all_gather(tensor)`` and its
bytes; ``sum_in_my_half(rank, world_size, x)``, the sum over the even or the odd ranks."""

import math
import random
import re
from collections.abc import Callable
from functools import partial

from ddp_lib.exercises.checking import (
    COLLECTIVES,
    MISSING_WAIT,
    Report,
    as_number,
    check_on_ranks,
    run_counted,
    worker_name,
)

_close = partial(math.isclose, rel_tol=1e-5, abs_tol=1e-6)


def diagnose(runs: list[dict], values: list[float]) -> str | None:
    """The mistake these ranks' answers show, named with its fix (None: they are right)."""
    world_size, total = len(runs), sum(values[:len(runs)])
    calls = [call for run in runs for call in run["calls"]]
    called = list(dict.fromkeys(name for run in runs for name in run["called"]))
    late = [c["name"] for c in calls if c["async_op"] and not c["waited"]]
    ops = {call["op"] for call in calls if call["name"] == "all_reduce"} - {"SUM", None}
    if late:
        return MISSING_WAIT.format(late[0])
    answers = [as_number(run["result"]) for run in runs]  # a float, else its kind
    if kind := next((a for a in answers if isinstance(a, str)), None):
        return f"a rank returned {kind}, not a number" + (" (call .item() on it)" if "Tensor" in kind else "")
    wrong = [(rank, a) for rank, a in enumerate(answers) if not _close(a, total / world_size)]
    if not called:  # a right mean came through a route not counted (a ProcessGroup method)
        return "no collective ran: a rank knows only its own value; combine them with all_reduce" if wrong else None
    if "all_reduce" not in called:
        return f"the ranks combined their values with {', '.join(called)}; the exercise is dist.all_reduce"
    if not wrong:  # ReduceOp.AVG, or SUM then / world_size
        return None
    if ops - {"AVG"}:
        return (f"an all-reduce ran, but with op={', '.join(sorted(ops))}: the default op "
                "(ReduceOp.SUM) then / world_size gives the mean")
    rank, value = wrong[0]
    divisor, mean, returned = total / value if value else 0, total / world_size, f"rank {rank} returned {value:g}"
    # (whether the first wrong value shows this mistake, the mistake and its fix): the first that holds is said.
    mistakes = (
        ("reduce" in called and [r for r, _ in wrong] == list(range(1, world_size)),
         "only rank 0 has the mean: dist.reduce leaves it on the destination rank; all_reduce on every rank"),
        (_close(value, total), f"{returned}, the sum over ranks: divide by world_size to get the mean"),
        (divisor and _close(divisor, world_size ** 2), f"{returned}: divided by world_size twice"),
        (divisor and _close(divisor, round(divisor)) and round(divisor) != world_size,
         f"{returned}, the sum divided by {round(divisor)}, a constant: divide by world_size ({world_size} here)"),
        (value.is_integer(), f"{returned}, a whole number for a mean of {mean:g}: // or an integer tensor rounds "
         "down; divide with / on a float tensor"),
    )
    return next((said for seen, said in mistakes if seen), f"{returned}, expected the mean {mean:g}")


def _values_with_fractional_means(world_sizes: tuple[int, ...]) -> list[float]:
    """Values drawn now, with tenths, whose mean over each world size checked is not a whole number:
    integer arithmetic (``//``, an integer tensor) then always shows. 58.4 and 41.6, whose mean is
    50, would let ``//`` pass."""
    while True:
        values = [random.randint(1, 99) + random.randint(1, 9) / 10 for _ in range(max(world_sizes))]
        if not any((sum(values[:n]) / n).is_integer() for n in world_sizes):
            return values


def _tensor_note(runs: list[dict]) -> str:
    """A note when a rank returned a one-element tensor, which the checker accepts as its number."""
    if any(type(run["result"]).__name__ == "Tensor" for run in runs):
        return " (a rank returned a one-element tensor: .item() gives the float the signature promises)"
    return ""


def check_mean_across_ranks(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30.0):
    """A report on ``fn(rank, world_size, x)`` on each world size: one line per world size."""
    values = _values_with_fractional_means(world_sizes)
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, values),
                          (worker_name(fn), COLLECTIVES, values), timeout=timeout,
                          passed=lambda runs: (f"every rank returned the mean {sum(values[:len(runs)]) / len(runs):g}"
                                               + _tensor_note(runs)),
                          where=lambda runs: f"world_size {len(runs)}, values {values[:len(runs)]}")


# Exercise 5: sum_in_my_half(rank, world_size, x): the sum of x over the even ranks, or over the odd ranks.

_SUBGROUP_CALLS = ("all_reduce", "new_group", "new_subgroups_by_enumeration", "new_subgroups")


def _halves_problem(runs: list[dict], values: list[float]) -> str | None:
    """Why these ranks' results are not their halves' sums (None: they are), the mistake named with its fix."""
    world_size = len(runs)
    halves = [sum(values[r] for r in range(rank % 2, world_size, 2)) for rank in range(world_size)]
    for rank, run in enumerate(runs):
        got = as_number(run["result"])
        if isinstance(got, str):
            return f"rank {rank} returned {got}: return the sum as a float, such as t.item()"
        if _close(got, halves[rank]):
            continue
        if not {"new_group", "new_subgroups_by_enumeration", "new_subgroups"} & set(run["called"]):
            return (f"rank {rank} made no subgroup: on every rank, build both halves with "
                    "dist.new_group(ranks), evens first, then odds")
        if _close(got, sum(values[:world_size])):
            return (f"rank {rank} returned the sum over all ranks, {got:g}: pass group= its own half's group "
                    "to all_reduce")
        if _close(got, values[rank]):
            return (f"rank {rank} returned its own x, {got:g}: its all_reduce ran in a group it is not in, "
                    "and such a call does nothing. Pass the group of rank % 2: evens for 0, odds for 1")
        return f"rank {rank} returned {got:g}, expected {halves[rank]:g}, the sum of x over its half"
    return None


def check_sum_in_my_half(fn: Callable | None, world_sizes: tuple[int, ...] = (3, 4), timeout: float = 60.0):
    """Exercise 5: a report on ``fn(rank, world_size, x)`` on 3 and 4 ranks: each rank returns the sum of
    ``x`` over the ranks of its half, the even ranks or the odd ranks, all-reduced in a subgroup."""
    if fn is None:
        report = Report()
        report.fail("set halves_worker to your worker, sum_in_my_half(rank, world_size, x), imported from my_work")
        return report
    values = [float(v) for v in random.sample(range(1, 1000), max(world_sizes))]  # rank r's x: values[r]
    return check_on_ranks(run_counted, world_sizes, lambda runs: _halves_problem(runs, values),
                          (worker_name(fn), _SUBGROUP_CALLS, values), timeout=timeout,
                          passed="each rank returned the sum over its half",
                          where=lambda runs: f"world_size {len(runs)}, values {values[:len(runs)]}")


def _ranks(answer) -> list[int] | None:
    """The answer as a sorted list of ranks, or None if it is not a collection of whole numbers."""
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer = [answer]
    try:
        ranks = sorted(set(answer))
    except TypeError:
        return None
    return ranks if all(isinstance(r, int) and not isinstance(r, bool) for r in ranks) else None


# Exercise 2: reduce with MAX to rank 2, on 4 ranks whose tensors are start_tensor's [10r+1, ..., 10r+4].

_REDUCE_WORLD, _REDUCE_DST = 4, 2
_MAX = [float(10 * (_REDUCE_WORLD - 1) + i) for i in range(1, _REDUCE_WORLD + 1)]  # rank 3's tensor
_SUM = [float(sum(10 * r + i for r in range(_REDUCE_WORLD))) for i in range(1, _REDUCE_WORLD + 1)]


def check_reduce_max_to_2(answer, run: list | None) -> str:
    """Exercise 2: ``answer``, the ranks whose result a learner trusts after ``dist.reduce(mine, dst=2,
    op=dist.ReduceOp.MAX)``, and ``run``, each rank's tensor as a list, in rank order, from 4 ranks."""
    if answer is None:
        return "Not yet: set trusted_ranks to your answer, a list of ranks such as [0, 1]."
    ranks = _ranks(answer)
    if ranks is None:
        return f"trusted_ranks = {answer!r}: expected a list of rank numbers, such as [0, 1]."
    if not run:
        return "Not yet: set run_max to what ddp_lib.mp.labelled_spawn(your_worker, args=(4,), nprocs=4) returns."
    if len(run) != _REDUCE_WORLD:
        return f"run_max holds {len(run)} ranks: run your worker on 4 ranks, with args=(4,) and nprocs=4."
    try:
        tensors = [[float(v) for v in r] for r in run]
    except (TypeError, ValueError):
        return "run_max should hold each rank's tensor as a list: end your worker with return mine.tolist()."
    if (summed := next((r for r, t in enumerate(tensors) if t == _SUM), None)) is not None:
        return (f"rank {summed} holds {_SUM}, the sum: reduce's default op is SUM. "
                "Pass op=dist.ReduceOp.MAX.")
    if tensors[_REDUCE_DST] != _MAX:
        if tensors[0] == _MAX:
            return f"rank 2 holds {tensors[2]}, and rank 0 the maximum: is dst=0? Pass dst=2."
        return (f"rank 2 holds {tensors[2]}, not the maximum {_MAX}: every rank calls "
                "dist.reduce(mine, dst=2, op=dist.ReduceOp.MAX) on start_tensor(rank, world_size, device).")
    if ranks == [_REDUCE_DST]:
        others = ", ".join(f"rank {r} {tensors[r]}" for r in range(_REDUCE_WORLD) if r != _REDUCE_DST)
        return f"Right: only rank 2, dst, is promised the maximum {_MAX}. Your run left {others}."
    if _REDUCE_DST not in ranks:
        return f"trusted_ranks = {ranks}: rank 2 is dst, the one rank whose result reduce promises."
    other = next(r for r in ranks if r != _REDUCE_DST)
    if tensors[other] == _MAX:
        return (f"trusted_ranks = {ranks}: rank {other} holds the maximum in your run, but only by chance. "
                "reduce promises the result on dst only; gloo uses the other ranks' tensors as scratch space.")
    return (f"trusted_ranks = {ranks}: rank {other} holds {tensors[other]}, which is not the maximum. "
            "Only dst's result is promised.")


# Exercise 3: section 7's swap on 2 ranks, written with dist.batch_isend_irecv.

_P2P = ("batch_isend_irecv", "isend", "irecv", "send", "recv")
# gloo has no connection from a rank to itself: "Pair is not connected" is a send to, or receive from, oneself.
SWAP_HINTS = ((r"Pair is not connected|same as the rank of the current process|Invalid (destination|source) rank",
               "each rank sends to and receives from its peer, 1 - rank, not itself"),)


def _swap_problem(runs: list[dict]) -> str | None:
    """Why these two ranks' answers are not a swap (None: they are), the mistake named with its fix."""
    called = list(dict.fromkeys(name for run in runs for name in run["called"]))
    if "batch_isend_irecv" not in called:
        used = ", ".join(called) or "no point-to-point call"
        return (f"the ranks used {used}; the exercise is one dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, "
                "peer), dist.P2POp(dist.irecv, received, peer)]) on each rank")
    if (rank := next((r for r, run in enumerate(runs) if run.get("self_peer")), None)) is not None:
        return f"rank {rank} named itself as the peer: {SWAP_HINTS[0][1]}"
    for rank, run in enumerate(runs):
        requests = [seen for call in run["calls"] for seen in call.get("requests", [])]
        if unwaited := sum(not seen["waited"] for seen in requests):
            return (f"rank {rank} never waited on {unwaited} of the {len(requests)} requests batch_isend_irecv "
                    "returned: call .wait() on every one before reading the received tensor")
    got_each = []
    for rank, run in enumerate(runs):
        got = run["result"]
        got = got.tolist() if hasattr(got, "tolist") else got
        if not isinstance(got, list):
            return f"rank {rank} returned a {type(got).__name__}: return the tensor irecv filled"
        if len(got) != (numel := run["numel"]):
            return f"rank {rank} returned {len(got)} values, expected {numel}: receive into torch.empty_like(mine)"
        got_each.append(got)
    # Rank 0's own values are zeros, as an unfilled buffer may be: "its own values" only when every rank's are.
    if all(all(v == rank for v in got) for rank, got in enumerate(got_each)):
        return "each rank returned its own values: return the tensor that irecv filled, not mine"
    for rank, got in enumerate(got_each):
        if not all(v == 1 - rank for v in got):
            return (f"rank {rank}'s returned tensor does not hold rank {1 - rank}'s values: return the tensor you "
                    "passed to dist.irecv, and read it only after every request's .wait()")
    return None


def run_swap(rank: int, world_size: int, target: str, numel: int) -> dict:
    """In a rank: the learner's ``target(rank, world_size, numel)``, and the point-to-point calls it made."""
    try:
        run = run_counted(rank, world_size, target, _P2P, [numel] * world_size)
    except (RuntimeError, ValueError) as exc:  # a peer that is the rank itself: said here, whatever the timing
        if not re.search(SWAP_HINTS[0][0], str(exc)):
            raise
        return {"result": None, "calls": [], "called": ["batch_isend_irecv"], "numel": numel, "self_peer": str(exc)}
    return {**run, "numel": numel}


def check_batch_swap(fn: Callable | None, numel: int = 1000, timeout: float = 30.0):
    """Exercise 3: a report on ``fn(rank, world_size, numel)`` on 2 ranks: each rank fills
    ``torch.full((numel,), float(rank))``, swaps it with ``batch_isend_irecv`` and returns what it received."""
    if fn is None:
        report = Report()
        report.fail("set swap_worker to your worker, swap_batched(rank, world_size, numel), imported from my_work")
        return report
    return check_on_ranks(run_swap, (2,), _swap_problem, (worker_name(fn), numel), timeout=timeout, hints=SWAP_HINTS,
                          passed=f"both ranks received the other's {numel} values through batch_isend_irecv")


# Exercise 4: ring_all_gather(tensor) from isend/recv on 3 ranks, and the bytes each rank sends.

_RING_WORLD, _RING_NUMEL = 3, 1000


def run_ring(rank: int, world_size: int, target: str, numel: int) -> dict:
    """In a rank: ``dist.all_gather``'s chunks, then the learner's ``target(tensor)`` and the calls it made."""
    import torch
    import torch.distributed as dist

    from ddp_lib.exercises.checking import counting_collectives, load_worker
    from ddp_lib.process_group import process_group

    with process_group(rank, world_size) as device:
        tensor = torch.arange(numel, dtype=torch.float32, device=device) + 10_000 * rank
        expected = [torch.empty_like(tensor) for _ in range(world_size)]
        dist.all_gather(expected, tensor)
        with counting_collectives(*COLLECTIVES, "isend", "send", "irecv", "recv") as calls:
            result = load_worker(target)(tensor.clone())
        if isinstance(result, (list, tuple)) and all(hasattr(c, "tolist") for c in result):
            result = [c.tolist() for c in result]
        else:
            result = f"a {type(result).__name__}"
        return {"result": result, "expected": [e.tolist() for e in expected],
                "called": list(dict.fromkeys(call["name"] for call in calls))}


def _ring_problem(runs: list[dict]) -> str | None:
    """Why these ranks' chunks are not all_gather's (None: they are), the mistake named with its fix."""
    called = list(dict.fromkeys(name for run in runs for name in run["called"]))
    if built_in := [name for name in called if name in COLLECTIVES]:
        return f"ring_all_gather called dist.{built_in[0]}; build it from dist.isend and dist.recv only"
    for rank, run in enumerate(runs):
        got, expected = run["result"], run["expected"]
        if isinstance(got, str):
            return f"rank {rank}'s ring_all_gather returned {got}: return the list of world_size chunks"
        if len(got) != len(expected):
            return f"rank {rank} returned {len(got)} chunks: return one per rank, {len(expected)} here"
        if wrong := [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]:
            return (f"rank {rank}'s chunk(s) {wrong} differ from dist.all_gather's: rank r starts owning chunk r, so "
                    "at step s it sends chunk (rank - s) % world_size, receives (rank - s - 1) % world_size")
    return None


def check_ring_all_gather(fn: Callable | None, bytes_each, timeout: float = 30.0) -> Report:
    """Exercise 4: a report on ``fn(tensor)``, a ring all-gather returning the world_size chunks, on 3 ranks
    with 1000 float32 each, and on ``bytes_each``, the learner's count of the bytes one rank sends."""
    if fn is None:
        report = Report()
        report.fail("set ring_worker to your ring_all_gather(tensor), imported from my_work")
        return report
    report = check_on_ranks(run_ring, (_RING_WORLD,), _ring_problem, (worker_name(fn), _RING_NUMEL), timeout=timeout,
                            passed="every rank's chunks equal dist.all_gather's", where=lambda runs:
                            f"world_size {len(runs)}, {_RING_NUMEL} float32 per rank")
    size, n = _RING_NUMEL * 4, _RING_WORLD
    expected = (n - 1) * size
    mistakes = {n * size: "that counts a rank's own chunk too: it never sends that one back to itself",
                size: "that is one step; the ring takes world_size - 1 steps",
                2 * (n - 1) / n * size: "that is a ring all-reduce's figure, 2 (N - 1)/N; an all-gather has no "
                                        "reduce-scatter half",
                8 * expected: "that counts bits: a float32 is 4 bytes"}
    number = as_number(bytes_each) if bytes_each is not None else None
    if number is None:
        report.fail(f"set bytes_each to the bytes one rank sends, for {_RING_NUMEL} float32 on {n} ranks")
    elif isinstance(number, str):
        report.fail(f"bytes_each is {number}, not a number of bytes")
    elif _close(number, expected):
        whole = n * size  # the gathered tensor
        report.ok(f"bytes_each {expected}: (world_size - 1) steps of {size} bytes. That is half of section 9's "
                  f"ring all-reduce of the gathered {whole}-byte tensor, 2(N-1)/N x {whole} = {2 * expected}: "
                  "an all-gather is the ring all-reduce's second half")
    else:  # a mistake's figure rounded to whole bytes (5333 for 5333.33) is still that mistake
        hint = next((said for value, said in mistakes.items() if abs(number - value) < 1),
                    f"each of the {n - 1} steps sends one chunk of {_RING_NUMEL} float32")
        report.fail(f"bytes_each = {number:g}: {hint}")
    return report
