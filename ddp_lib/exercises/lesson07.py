"""Checkers for lesson 07: exercise 2, ``evaluate(rank, world_size, metric)``, the mean on every rank, no hang;
exercise 4, the reading of a shape mismatch on 3 ranks under DETAIL; exercise 1, the rank a monitored barrier
finds missing; exercise 3, the ranks rank 0's error names; exercise 5, the diagnosis of ``stray_report``'s
failure (the function and the step)."""

import math
import random
from collections.abc import Callable

from ddp_lib.exercises.checking import COLLECTIVES, Report, as_number, check_on_ranks, run_counted, worker_name


def diagnose(results: list[dict], want: float) -> str | None:
    """The mistake the ranks' answers show, named (None: every rank returned the mean ``want``)."""
    silent = [rank for rank, r in enumerate(results) if not r["called"]]
    wrong = [(rank, value) for rank, value in enumerate(as_number(r["result"]) for r in results)
             if isinstance(value, str) or not math.isclose(value, want, rel_tol=1e-5)]
    if wrong and silent:
        return (f"rank {silent[0]} ran no collective; a rank knows only its own metric, so the mean needs one that "
                "every rank calls (all_reduce)")
    if wrong:
        rank, got = wrong[0]
        return (f"rank {rank} returned {got if isinstance(got, str) else round(got, 6)}, expected the mean "
                f"{want:.4g} on every rank")
    return None


def check_evaluation(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 30):
    """A report on ``fn(rank, world_size, metric)`` on each world size, with a deadline; one line per world size."""
    metrics = [round(random.uniform(0.01, 0.99), 6) for _ in range(max(world_sizes))]
    mean = {size: sum(metrics[:size]) / size for size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, mean[len(runs)]),
                          (worker_name(fn), COLLECTIVES, metrics), timeout=timeout,
                          passed=lambda runs: f"every rank returned the mean {mean[len(runs)]:.4g}",
                          where=lambda runs: f"world_size {len(runs)}, metrics {metrics[:len(runs)]}")


# Exercise 4, run on 3 ranks under DETAIL (docs/answers.md): every rank raises; rank r all-reduces r + 2 elements,
# as run: rank 0's error names rank 1's shape, the errors of ranks 1 and 2 name rank 0's.
MISMATCH_ON_3 = {0: ([2], [3]), 1: ([3], [2]), 2: ([4], [2])}
READING_FORM = "a dict {rank: (its shape, the shape its error compares it with)}, one pair per rank that raised"


def _shape(value: object) -> list[int] | None:
    """A shape written as a list, a tuple or a ``torch.Size`` (None: not a shape)."""
    try:
        return [int(n) for n in value]
    except (TypeError, ValueError):
        return None


def check_mismatch_reading(reading: object) -> Report:
    """A report on exercise 4's answer, ``{rank: (its shape, the other shape)}``: one line per rank."""
    report = Report()
    if not isinstance(reading, dict) or not reading:
        report.fail(f"write your reading: {READING_FORM}; got {reading!r}")
        return report
    for rank in sorted(set(reading) - set(MISMATCH_ON_3), key=str):
        report.fail(f"rank {rank!r}: the run has ranks 0, 1 and 2 only")
    for rank in sorted(set(MISMATCH_ON_3) - set(reading)):
        report.fail(f"no pair for rank {rank}, yet it raised too: print sorted(e.failures)")
    for rank in sorted(set(MISMATCH_ON_3) & set(reading)):
        want_own, want_other = MISMATCH_ON_3[rank]
        pair = reading[rank]
        shapes = [_shape(value) for value in pair] if isinstance(pair, (tuple, list)) and len(pair) == 2 else None
        if shapes is None or None in shapes:
            report.fail(f"rank {rank}: give a pair of shapes such as ([2], [3]); got {pair!r}")
        elif shapes == [want_own, want_other]:
            report.ok(f"rank {rank}: its {want_own} against {want_other}")
        elif shapes == [want_other, want_own]:
            report.fail(f"rank {rank}: the pair is reversed; put the rank's own shape first")
        elif shapes[0] != want_own:
            report.fail(f"rank {rank}: its own shape is not {shapes[0]}; mismatched_shapes gives rank r a tensor of "
                        "r + 2 elements")
        else:
            report.fail(f"rank {rank}: its error does not compare it with {shapes[1]}; read which rank's TensorShape "
                        f"its message names beside its own (e.failures[{rank}])")
    return report


def _ranks(value: object) -> set[int] | None:
    """The ranks written as a set, list, tuple or range of whole numbers (None: not that)."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        return None
    try:
        ranks = list(value)
        return set(int(rank) for rank in ranks) if ranks and all(float(r) == int(r) for r in ranks) else None
    except (TypeError, ValueError):
        return None


def _check_named(named: object, world_size: int, form: str, wrong: Callable[[set[int]], str | None]) -> Report:
    """A report on the ranks a reading says rank 0's error names, on ``world_size`` ranks; ``wrong`` names the
    mistake particular to the exercise (None: the reading is right)."""
    report, ranks = Report(), _ranks(named)
    if ranks is None:
        report.fail(f"write your reading: {form}, such as {{1}}; got {named!r}")
    elif outside := sorted(ranks - set(range(world_size))):
        report.fail(f"rank {outside[0]}: the run has ranks 0 to {world_size - 1} only")
    elif 0 in ranks:
        report.fail("rank 0 wrote the message: it names the ranks that did not come, never itself")
    elif problem := wrong(ranks):
        report.fail(problem)
    else:
        report.ok(f"rank 0's error names ranks {', '.join(map(str, sorted(ranks)))}")
    return report


def check_barrier_reading(missing: object) -> Report:
    """Exercise 1: the rank the probe at the epoch end (``probe="epoch_end"``) finds missing on 4 ranks, with the
    fixed evaluation (``through_module=True``) and rank 2 skipping the probe (``skip_probe_rank=2``). Rank 0's error
    names rank 2; ranks 1 and 3 reached the barrier, and their "from rank 0" errors are echoes of rank 0's failure."""
    report, ranks = Report(), _ranks(missing)
    if ranks is None and isinstance(missing, (set, list, tuple, range)) and not missing:
        report.fail("a rank is missing: every rank raised, and rank 0's error names one")
    elif ranks is None:
        report.fail(f"write your reading: the rank(s) missing from the barrier, as a set of ints, such as {{1}}; "
                    f"got {missing!r}")
    elif outside := sorted(ranks - set(range(4))):
        report.fail(f"rank {outside[0]}: the run has ranks 0 to 3 only")
    elif ranks == {2}:
        report.ok("rank 2 is missing: rank 0's error names it; ranks 1 and 3 reached the barrier, and their "
                  "\"from rank 0\" errors are echoes of rank 0's failure")
    elif 0 in ranks:
        report.fail("rank 0's error names ranks, so rank 0 reached the barrier: read the ranks it names. "
                    "The others' \"from rank 0\" errors are echoes of its failure")
    else:
        report.fail("ranks 1 and 3 each say they reached the barrier: only the ranks rank 0's error names are "
                    "missing")
    return report


def check_missing_reading(named: object, waiting_in: object = None) -> Report:
    """Exercise 3: the ranks that rank 0's error names on 3 ranks under DETAIL (1 and 2), and the kind of
    collective they wait in, which is why both are named: DDP's broadcast, on DDP's own group."""
    def wrong(ranks: set[int]) -> str | None:
        if ranks == {1}:
            return "that is the 2-rank run's message: run it with 3 ranks (run_ranks(..., 3, env=...))"
        return None if ranks == {1, 2} else "read the ranks the message lists after [Rank 0]: Ranks"
    report = _check_named(named, 3, "the ranks rank 0's error names, as a set of ints", wrong)
    kind = waiting_in.strip().lower().replace("-", "_") if isinstance(waiting_in, str) else ""
    if not kind:
        report.fail("write the kind of collective the other ranks wait in, as a str; "
                    f"got they_wait_in={waiting_in!r}")
    elif "broadcast" in kind:
        report.ok("they wait in DDP's broadcast (step 1's bucket rebuild) on DDP's own group, so neither "
                  "comes to the check on the default group")
    elif "monitored" in kind or "barrier" in kind:
        report.fail("the monitored barrier is the check rank 0 waits in; the other ranks never reach it: "
                    "where are they after step 0? Read the exercise's hint on the bucket rebuild")
    elif "all_reduce" in kind or "allreduce" in kind:
        report.fail("the all-reduce is rank 0's stray call; the other ranks went on to step 1's forward: "
                    "which collective does DDP's bucket rebuild run there? Read the exercise's hint")
    else:
        report.fail(f"{waiting_in!r} is not the collective the other ranks wait in: they are in step 1's forward, "
                    "inside DDP's bucket rebuild (the exercise's hint links it)")
    return report


# Exercise 5: stray_report.train on 3 ranks; the stray all_reduce is in _best_so_far, at the last step (2).
STRAY_FUNCTION, STRAY_STEP, STRAY_STEPS = "_best_so_far", 2, 3
DIAGNOSIS_FORM = "the script's function that contains the stray all_reduce line (a str) and the step (an int)"


def check_diagnosis(function: object, step: object) -> Report:
    """A report on exercise 5's answer: the function of ``stray_report`` that calls the stray collective, and
    the step it does so at; one line each."""
    report = Report()
    name = function.strip().split("(")[0].rsplit(".", 1)[-1] if isinstance(function, str) else None
    if function is None and step is None:
        report.fail(f"write your reading: {DIAGNOSIS_FORM}; got None for both")
        return report
    if not name:
        report.fail(f"write the function's name as a str, such as \"my_function\"; got function={function!r}")
    elif name.lstrip("_") == STRAY_FUNCTION.lstrip("_"):
        report.ok(f"{STRAY_FUNCTION} calls the stray all_reduce, on rank 0 only")
    elif name in ("all_reduce", "_all_reduce", "wrapper", "reduce"):
        report.fail(f"{name} is torch's function, not the script's: read up from the bottom of the traceback, "
                    "past torch's frames, to the first frame in stray_report.py")
    elif name == "_report":
        report.fail("_report calls the function that calls the collective: the last frame of stray_report.py "
                    "in the traceback is one below it")
    elif name == "train":
        report.fail("train's all_reduce runs on every rank; the stray one is deeper: read the traceback from "
                    "the bottom up to the last frame of stray_report.py")
    else:
        report.fail(f"{name} is not the function the traceback names: read it from the bottom up to the first "
                    "frame in stray_report.py")
    number = as_number(step)
    if isinstance(number, str) or number != int(number):
        report.fail(f"write the step as an int, as range(steps) counts it; got step={step!r}")
    elif number == STRAY_STEP:
        report.ok(f"step {STRAY_STEP}, the last of {STRAY_STEPS} (step == steps - 1)")
    elif number == STRAY_STEPS:
        report.fail(f"steps count from 0: the loop runs range({STRAY_STEPS}), so its last step is not "
                    f"{STRAY_STEPS}")
    else:
        report.fail(f"not step {int(number)}: open stray_report.py and read the condition in _report that lets "
                    "rank 0 through (which step is it?)")
    return report
