"""Checkers for lesson 02's exercises: ``reassemble(rank, world_size, share)``, the round-robin list
rebuilt; ``plan_launch(world_size, out_dir)``, the arguments of ``mp.spawn``, checked as each child
would use them, without starting a process; and the rank a ``functools.partial`` failure names."""

import functools
import inspect
import pickle
import random
import re
from collections.abc import Callable, Sequence

from ddp_lib.exercises.checking import COLLECTIVES, Report, check_on_ranks, run_counted, worker_name

PLAN_OUT_DIR = "my_work/lesson02-calls"  # handed to plan_launch; nothing is written there

HINTS = ((r"TypeError.*positional argument", "the checker calls fn(rank, world_size, share)"),
         (r"doesn't match expected size", "all_gather needs a tensor of the same shape from every rank, and shares "
          "differ in length: pad them to one length, or use all_gather_object"))


def _diagnose(rank: int, got: object, shares: list[list], called: list[str]) -> str | None:
    """Why ``got`` from ``rank`` is not the whole list (None: it is), the mistake named."""
    # Round robin: item i is shares[i % world_size][i // world_size].
    whole = [shares[i % len(shares)][i // len(shares)] for i in range(sum(map(len, shares)))]
    got = got.tolist() if hasattr(got, "tolist") else got  # a tensor: its numbers
    got = got if isinstance(got, list) else f"a {type(got).__name__}"
    if got == whole:
        return None
    if isinstance(got, str):
        return f"rank {rank} returned {got}; return the whole list of {len(whole)} numbers"
    if not called:
        return f"no collective ran, so rank {rank} has only its own share: use dist.all_gather_object"
    if got == [x for share in shares for x in share]:
        return (f"rank {rank} returned the shares one after another, rank by rank; the split is round robin: "
                "item i is shares[i % world_size][i // world_size]")
    if len(got) != len(whole):
        return f"rank {rank} returned {len(got)} items; the whole list has {len(whole)}"
    i = next(i for i, (a, b) in enumerate(zip(got, whole)) if a != b)
    where = f"item {i} is {got[i]}, expected {whole[i]} (item {i // len(shares)} of rank {i % len(shares)}'s share)"
    order = "the right items in the wrong order" if sorted(got) == sorted(whole) else "a wrong list"
    return f"rank {rank} returned {order}: its {where}"


def check_reassemble(fn: Callable, world_sizes: Sequence[int] = (2, 3), timeout: float = 60.0):
    """A report on ``fn(rank, world_size, share)`` on each world size, shares drawn afresh."""
    n = random.choice([n for n in range(9, 30) if n % 2 and n % 3])  # unequal shares on 2 and 3 ranks
    shares = {size: [[random.randrange(1000) for _ in range(rank, n, size)] for rank in range(size)]
              for size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: next(filter(None, (
        _diagnose(rank, run["result"], shares[len(runs)], run["called"]) for rank, run in enumerate(runs))), None),
        lambda size: (worker_name(fn), COLLECTIVES, shares[size]), "every rank returned the whole list in order",
        where=lambda runs: f"world_size {len(runs)}, n {n}", timeout=timeout, hints=HINTS)


def _plan_problem(plan: object, world_size: int, out_dir: str) -> str | None:
    """Why ``mp.spawn(**plan)`` would not run ``record_args(i, world_size, out_dir)`` in child i (None: it would)."""
    if not isinstance(plan, dict) or not {"fn", "args", "nprocs"} <= set(plan):
        return (f"plan_launch returned {plan!r:.60}; return the keyword arguments of mp.spawn: "
                "dict(fn=..., args=..., nprocs=...)")
    fn, args, nprocs = plan["fn"], plan["args"], plan["nprocs"]
    if nprocs != world_size:
        return f"nprocs is {nprocs!r}: mp.spawn starts nprocs children, one per rank, so nprocs=world_size"
    if isinstance(args, (str, dict)):
        return (f"args is the {type(args).__name__} {args!r}: * unpacks a string into its characters and a dict "
                "into its keys; put the values in a tuple")
    try:
        args = tuple(args)
    except TypeError:
        return (f"args is the {type(args).__name__} {args!r}, not an iterable: each child runs fn(i, *args), "
                "and (x) is just x in Python: write (x, ...)")
    target = fn.func if isinstance(fn, functools.partial) else fn
    name = getattr(target, "__qualname__", repr(target))
    if getattr(target, "__module__", None) == "__main__":
        return (f"fn is {name}, defined in the notebook: a spawned child's __main__ has no such function; "
                "import the worker from a module, as record_args is")
    for what, value in (("fn", fn), ("args", args)):
        try:
            pickle.dumps(value)
        except Exception as e:  # PicklingError, TypeError, AttributeError: each names the object
            shown = re.sub(r" at 0x[0-9a-f]+", "", str(e))
            return (f"{what} does not pickle ({type(e).__name__}: {shown}); mp.spawn pickles fn and args for "
                    "each child: a lambda, a function defined inside another, or an open file cannot go")
    if (getattr(target, "__module__", None), name) != ("ddp_lib.workers.spawning", "record_args"):
        return f"fn is {name}; the worker to start is record_args, itself or in a functools.partial"
    for i in range(nprocs):
        try:
            bound = inspect.signature(fn).bind(i, *args)
        except TypeError as e:
            return (f"child {i} would call fn({i}, *args) and get TypeError: {e}; mp.spawn puts the index i "
                    "first, so args holds only what comes after the rank")
        bound.apply_defaults()
        got = dict(bound.arguments)
        expected = {"i": i, "world_size": world_size, "out_dir": out_dir}
        if got != expected:
            called = ", ".join(f"{k}={v!r}" for k, v in got.items())
            return f"child {i} would run record_args({called}); it should get i={i}, world_size={world_size}, " \
                   f"out_dir={out_dir!r}"
    return None


def check_plan_launch(plan_launch: Callable, world_sizes: Sequence[int] = (2, 3)) -> Report:
    """A report on ``plan_launch(world_size, out_dir)``, the keyword arguments of ``mp.spawn`` that start
    ``world_size`` ranks of ``record_args``: for each world size, what each child would unpickle and call."""
    report = Report()
    for world_size in world_sizes:
        where = f"world_size {world_size}"
        try:
            problem = _plan_problem(plan_launch(world_size, PLAN_OUT_DIR), world_size, PLAN_OUT_DIR)
        except Exception as e:  # the learner's code raised: say what and where
            problem = f"plan_launch raised {type(e).__name__}: {e}"
        if problem:
            report.fail(f"{where}: {problem}")
        else:
            report.ok(f"{where}: fn and args pickle, and each child i would run record_args(i, {world_size}, out_dir)")
    return report


# Exercise 3: bad_rank=0 through functools.partial, started with ddp_lib.mp.labelled_spawn on 2 ranks.

def _rank_answer(answer) -> int | None:
    """The answer as one rank number, or None if it is not a whole number."""
    return answer if isinstance(answer, int) and not isinstance(answer, bool) else None


_LAUNCHERS = {("ddp_lib.mp", "labelled_spawn"), ("torch.multiprocessing.spawn", "spawn"),
              ("torch.multiprocessing.spawn", "start_processes")}  # (module, function) whose fn and args are read


def _launched(error) -> tuple[object, object] | None:
    """The ``fn`` and ``args`` that the launch which raised ``error`` was given, read from the frame of
    ``ddp_lib.mp.labelled_spawn`` (or torch's ``spawn``, ``start_processes``) that the exception's traceback keeps;
    None for text, or an exception that no launch raised."""
    tb = getattr(error, "__traceback__", None)
    while tb is not None:
        frame = tb.tb_frame
        launcher = (frame.f_globals.get("__name__"), frame.f_code.co_name)
        if launcher in _LAUNCHERS and {"fn", "args"} <= set(frame.f_locals):
            return frame.f_locals["fn"], frame.f_locals["args"]
        tb = tb.tb_next
    return None


def _partial_said(answer, error) -> str:
    """Exercise 3's verdict, a sentence: "Right: ..." or what to fix."""
    if answer is None:
        return "Not yet: set named_rank to your answer, the rank number the error names, such as 1."
    rank = _rank_answer(answer)
    if rank is None:
        return f"named_rank = {answer!r}: expected one rank number, such as 1."
    if error is None:
        return ("Not yet: set partial_error to the exception that ddp_lib.mp.labelled_spawn("
                "functools.partial(fail_on_rank, bad_rank=0), args=(2,), nprocs=2) raised "
                "(except Exception as e: partial_error = e).")
    said = str(error)
    if "binds positional arguments" in said:
        return ("your partial binds its value by position, and the launcher would pass the rank after it: "
                "bind bad_rank by name in the partial.")
    if "multiple values for argument" in said:
        return (f"your run raised: {readable_line(said)}. The launcher passes the rank first, by position: "
                "give only bad_rank by keyword, functools.partial(fail_on_rank, bad_rank=0).")
    if "was told to fail" not in said:
        return (f"partial_error says {readable_line(said)!r}, not fail_on_rank's ValueError: run "
                "functools.partial(fail_on_rank, bad_rank=0) with args=(2,) and nprocs=2.")
    failed = int(re.search(r"rank (\d+) of \d+ was told to fail", said).group(1))
    if failed != 0:
        return (f"your run failed on rank {failed}, fail_on_rank's default bad_rank: the keyword did not reach it. "
                "Pass fn=functools.partial(fail_on_rank, bad_rank=0), not fail_on_rank itself.")
    if rank == 1:
        return (f"named_rank = {rank}: 1 is fail_on_rank's default bad_rank, but your run says rank 0. "
                "The partial carries bad_rank=0 to every child.")
    if rank != 0:
        return f"named_rank = {rank}: read your run's error again; it names the rank in 'rank N of 2 was told to fail'."
    launched = _launched(error)
    if launched is None:
        return ("partial_error is not the exception that ddp_lib.mp.labelled_spawn raised (its text, or an "
                "exception made anew): the check reads from that exception what you launched. Keep it as it is: "
                "except Exception as e: partial_error = e.")
    fn, args = launched
    if not (isinstance(fn, functools.partial) and fn.keywords.get("bad_rank") == 0):
        shown = getattr(fn, "__qualname__", None) or repr(fn)
        return (f"your run launched {shown:.60} with args={args!r:.40}: rank 0 failed, but bad_rank=0 did not "
                "go through a partial. Launch fn=functools.partial(fail_on_rank, bad_rank=0) with args=(2,).")
    return "Right: the error names rank 0. The partial pickles with bad_rank=0, and each child gets it."


def _as_report(said: str) -> Report:
    """One PASS line for a "Right: ..." sentence, else one FAIL line, as the lesson's other checkers print."""
    report = Report()
    if said.startswith("Right: "):
        report.ok(said.removeprefix("Right: "))
    else:
        report.fail(said.removeprefix("Not yet: "))
    return report


def check_partial_bad_rank(answer, error) -> Report:
    """Exercise 3: ``answer``, the rank the error names, and ``error``, the exception that
    ``ddp_lib.mp.labelled_spawn(functools.partial(fail_on_rank, bad_rank=0), args=(2,), nprocs=2)`` raised. Its
    traceback keeps the launch's ``fn`` and ``args``: the check reads them to see that a partial carried
    ``bad_rank=0``."""
    return _as_report(_partial_said(answer, error))


def readable_line(text: str, limit: int = 160) -> str:
    """``text``'s last non-empty line, cut to ``limit`` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= limit else last[:limit - 3] + "..."
