"""Checkers for lesson 08's exercises: ``busbw(algbw, world_size)``, a measured all-reduce's bandwidth, the
all-reduces per step at ``bucket_cap_mb=2`` (exercise 3), and the alpha-beta model with halved bytes (exercise 6)."""

import itertools
import math
import random
from collections.abc import Callable

from ddp_lib.bench.report import bus_factor
from ddp_lib.exercises.checking import Report, as_number, check_on_ranks, run_counted, worker_name

REL_TOL, KEYS = 0.01, ("seconds", "algbw_gbs", "busbw_gbs")
# The time must match one of the worker's all-reduces as the checker timed them (or the mean of several
# in a row), give or take this factor and these seconds (Python's call and the checker's bookkeeping).
MEASURED_FACTOR, MEASURED_SLACK_S = 1.5, 0.002


def _factor_mistake(ratio: float, world_size: int) -> str:
    """What a wrong busbw/algbw ratio most likely means (tight tolerances: for N in the thousands (N-1)/N is near 1)."""
    factor = f"2(N-1)/N ({bus_factor(world_size):g} for N={world_size})"
    if math.isclose(ratio, (world_size - 1) / world_size, rel_tol=1e-6):
        return "the factor (N-1)/N is only one phase (reduce-scatter); all-reduce also all-gathers: 2(N-1)/N"
    if math.isclose(ratio, 1.0, rel_tol=1e-6):
        return f"busbw equals algbw: multiply by {factor}"
    return f"busbw / algbw is {ratio:.3g}, expected {factor}"


def check_busbw(busbw: Callable[[float, int], float], cases: int = 4) -> Report:
    """A report on ``busbw(algbw, world_size)`` for 2 and ``cases - 1`` drawn world sizes; stops at a mistake."""
    report, rng = Report(), random.Random()
    for world_size in [2, *rng.sample(range(3, 4097), cases - 1)]:
        algbw = round(rng.uniform(0.5, 50), 3)
        expected = algbw * bus_factor(world_size)
        try:
            got = as_number(busbw(algbw, world_size))
        except Exception as exc:  # the learner's code: report whatever it raised
            report.fail(f"busbw(algbw, {world_size}) raised {type(exc).__name__}: {exc}")
            return report
        if not isinstance(got, float) or not math.isclose(got, expected, rel_tol=1e-6):
            hint = f"; {_factor_mistake(got / algbw, world_size)}" if isinstance(got, float) and got else ""
            report.fail(f"busbw({algbw}, {world_size}) returned {got}, expected {expected:.6g}{hint}")
            return report
        report.ok(f"busbw(algbw, {world_size}) = algbw x {bus_factor(world_size):g}")
    return report


def _ours(calls: list[dict], nbytes: int) -> list[dict]:
    """The all-reduces of the float32 tensor of ``nbytes`` bytes that the exercise asks to time."""
    return [c for c in calls if c["numel"] == nbytes // 4 and c["dtype"] == "torch.float32"]


def _warm(calls: list[dict], ours: list[dict]) -> list[float]:
    """The seconds of those all-reduces after the rank's first collective, which also connects."""
    return [c["seconds"] for c in calls[1:] if c in ours]


def _max_mistake(rank: int, calls: list[dict], ours: list[dict]) -> str | None:
    """Whether ``rank`` all-reduced its time with MAX, the slowest rank's time (None: it did)."""
    if any(c["op"] == "MAX" for c in calls if c not in ours):
        return None
    if after := calls[calls.index(ours[-1]) + 1:]:  # collectives after the timed one: the time's all-reduce
        op = after[-1]["op"] or "the default SUM"
        return (f"rank {rank} all-reduced its time with {op}: use op=ReduceOp.MAX, so that every rank returns "
                "the slowest rank's time")
    return (f"rank {rank} returned its own time, but an all-reduce ends only when the slowest rank is done: "
            "all_reduce the seconds with op=ReduceOp.MAX and return that on every rank")


def diagnose(results: list[dict], nbytes: int) -> str | None:
    """The first mistake in the ranks' results, named with its fix (None: all is right)."""
    world_size = len(results)
    for rank, r in enumerate(results):
        out, calls = r["result"], r["calls"]
        ours = _ours(calls, nbytes)
        if not isinstance(out, dict) or any(k not in out for k in KEYS):
            return f"rank {rank} returned {type(out).__name__}: return a dict with keys {', '.join(KEYS)}"
        if not ours:
            seen = ", ".join(sorted({f"{c['numel']} x {c['dtype']}" for c in calls}))
            said = f"all-reduced {seen}, never" if calls else "ran no all-reduce of"
            return (f"rank {rank} {said} a float32 tensor of {nbytes} bytes: time dist.all_reduce of a tensor of "
                    "nbytes // 4 float32 elements")
        seconds = float(out["seconds"])
        if not seconds > 0:
            return f"rank {rank} measured {seconds} seconds: time the all-reduce with time.perf_counter()"
        if not _warm(calls, ours):
            return (f"rank {rank} timed the first all-reduce it ran, which also sets up gloo's connections: run "
                    "one all-reduce first (a warm-up), then time another")
        if mistake := _max_mistake(rank, calls, ours):
            return mistake
    returned = [float(r["result"]["seconds"]) for r in results]
    if len(set(returned)) > 1:
        said = ", ".join(f"rank {rank} {s:.3g} s" for rank, s in enumerate(returned))
        return (f"the ranks returned different seconds ({said}): return the seconds the MAX all-reduce gave, "
                "the same on every rank")
    # Near one all-reduce's time, or the mean of a run of them (a loop timed and divided), on some rank:
    # the MAX hands every rank the slowest rank's time.
    seconds, means, warm_all = returned[0], [], []
    for r in results:
        warm = _warm(r["calls"], _ours(r["calls"], nbytes))
        totals = list(itertools.accumulate(warm, initial=0.0))
        means += [(totals[j] - totals[i]) / (j - i) for i in range(len(warm)) for j in range(i + 1, len(warm) + 1)]
        warm_all += warm
    if not any(m / MEASURED_FACTOR - MEASURED_SLACK_S <= seconds <= m * MEASURED_FACTOR + MEASURED_SLACK_S
               for m in means):
        return (f"the ranks report {seconds:.3g} s, but their all-reduces of {nbytes} bytes took "
                f"{min(warm_all):.3g} to {max(warm_all):.3g} s after the first: time those, not other work")
    for rank, r in enumerate(results):
        algbw, busbw = float(r["result"]["algbw_gbs"]), float(r["result"]["busbw_gbs"])
        if not math.isclose(algbw, expected := nbytes / seconds / 1e9, rel_tol=REL_TOL):
            gib = math.isclose(algbw * 2**30, expected * 1e9, rel_tol=REL_TOL)
            return (f"rank {rank}: that is GiB/s (2**30 bytes); nccl-tests reports GB/s (1e9 bytes)" if gib else
                    f"rank {rank}: algbw should be nbytes / seconds / 1e9 (GB/s) = {expected:.4g}, got {algbw:.4g}")
        if not math.isclose(busbw, algbw * bus_factor(world_size), rel_tol=REL_TOL):
            return f"rank {rank}: {_factor_mistake(busbw / algbw, world_size)}"
    return None


def check_bandwidth_worker(fn: Callable, world_sizes: tuple[int, ...] = (2, 3), timeout: float = 90) -> Report:
    """A report on ``fn(rank, world_size, nbytes)`` on each world size, 4 to 16 MiB drawn now; stops at a failure."""
    nbytes = {world_size: 4 * random.randrange(1 << 20, 1 << 22) for world_size in world_sizes}
    return check_on_ranks(run_counted, world_sizes, lambda runs: diagnose(runs, nbytes[len(runs)]),
                          lambda size: (worker_name(fn), ("all_reduce",), [nbytes[size]] * size), stop=True,
                          timeout=timeout,
                          passed=lambda runs: f"every rank returned the slowest rank's time (MAX) for its "
                          f"all-reduce of a float32 tensor of {nbytes[len(runs)]} bytes; algbw = bytes / seconds "
                          f"and busbw = algbw x "
                          f"{bus_factor(len(runs)):g} (2(N-1)/N)")


# Exercise 3: how many all-reduces per step, lesson 04's BucketedOverlapDDP against torch's DDP.
COUNT_CAP_MB, LESSON_CAP_MB = 2, 1


def gradient_bytes() -> list[int]:
    """The DDP benchmark MLP's gradients in bytes, in the order backward produces them (last layer first)."""
    from ddp_lib.bench.ranks import DDP_WIDTHS
    from ddp_lib.workers.shared import make_mlp
    return [p.numel() * p.element_size() for p in reversed(list(make_mlp(0, DDP_WIDTHS).parameters()))]


def scratch_bucket_count(sizes: list[int], cap_bytes: int) -> int:
    """Lesson 04's BucketedOverlapDDP: a bucket closes *before* a gradient would take it past the cap."""
    count, filled = 1, 0
    for nbytes in sizes:
        if filled and filled + nbytes > cap_bytes:
            count, filled = count + 1, 0
        filled += nbytes
    return count


def torch_bucket_count(sizes: list[int], cap_bytes: int) -> int:
    """torch's DDP from its second step on (one dtype, one device, an explicit cap): a bucket closes once it
    has *reached* the cap, so it may pass it."""
    count, filled = 0, 0
    for nbytes in sizes:
        filled += nbytes
        if filled >= cap_bytes:
            count, filled = count + 1, 0
    return count + (filled > 0)


def _count_mistake(name: str, got: float, others: dict[float, str]) -> str:
    """The FAIL line for one wrong count: the likeliest mistake, or what to do."""
    hint = others.get(got, "list the gradients in backward's order (last layer first) and fill buckets in turn")
    return f"{name}: you said {got:g}, which is not right: {hint}"


def check_bucket_counts(scratch: object, torch_first: object, torch_later: object) -> Report:
    """A report on the three counts of exercise 3, at ``bucket_cap_mb=2``: all-reduces per step of
    ``BucketedOverlapDDP``, and of torch's DDP on its first step and on later steps."""
    sizes, cap, report = gradient_bytes(), COUNT_CAP_MB * 2**20, Report()
    right = {"scratch": scratch_bucket_count(sizes, cap), "first": 1, "later": torch_bucket_count(sizes, cap)}
    one_per_parameter = {float(len(sizes)): "that is one all-reduce per parameter; buckets group the gradients"}
    at_lesson_cap = f"that is the count at the lesson's {LESSON_CAP_MB} MiB cap; the exercise asks for bucket_cap_mb=2"
    lesson = LESSON_CAP_MB * 2**20
    hints = {
        "scratch": {**one_per_parameter,
                    float(right["later"]): "that is torch's rule; BucketedOverlapDDP closes a bucket *before* a "
                                           "gradient would take it past the cap",
                    float(scratch_bucket_count(sizes, lesson)): at_lesson_cap},
        "first": {**one_per_parameter,
                  float(right["later"]): "DDP's first step is special: it puts every gradient in one bucket, "
                                         "so the first step has one all-reduce"},
        "later": {**one_per_parameter,
                  float(right["scratch"]): "that is lesson 04's rule; torch's DDP closes a bucket once it has "
                                           "*reached* the cap, so a bucket may pass it",
                  1.0: "only the first step puts every gradient in one bucket; from the second step on, DDP cuts "
                       "buckets by the cap",
                  float(torch_bucket_count(sizes, lesson)): at_lesson_cap},
    }
    names = {"scratch": "BucketedOverlapDDP, per step", "first": "torch's DDP, first step",
             "later": "torch's DDP, later steps"}
    for key, value in (("scratch", scratch), ("first", torch_first), ("later", torch_later)):
        got = as_number(value)
        if isinstance(got, str):
            report.fail(f"{names[key]}: give a number of all-reduces, not {got}")
        elif got != right[key]:
            report.fail(_count_mistake(names[key], got, hints[key]))
        else:
            report.ok(f"{names[key]}: {right[key]} all-reduce{'s' * (right[key] != 1)}")
    return report


# Exercise 6: one all-reduce of the gradients in float32 and in 16 bits, from the kept 2-rank fit.
HALVED_REL_TOL = 0.02


def kept_fit(world_size: int) -> tuple[float, float]:
    """(alpha in seconds, beta in bytes per second) of the kept full run's fit for ``world_size``, from
    where the medians stop falling (``allreduce.fit_start``), the fit lesson 08's main line prints."""
    from ddp_lib.bench import allreduce
    return allreduce.held_fit(allreduce.full_run(), world_size)


def _halved_mistake(got: float, alpha: float, beta: float, nbytes: float, other_fit: tuple[float, float]) -> str:
    """What a wrong prediction (ms) of one all-reduce of ``nbytes`` most likely means."""
    def near(ms: float) -> bool:
        return math.isclose(got, ms, rel_tol=HALVED_REL_TOL)
    right = (alpha + nbytes / beta) * 1e3
    if near(right * 1e-3) or near(right * 1e3):
        return "give milliseconds: the fit's α is in µs and β in GB/s"
    if near(nbytes / beta * 1e3):
        return "add α: every all-reduce pays it once, whatever its size"
    if near((other_fit[0] + nbytes / other_fit[1]) * 1e3):
        return "that is the 4-rank fit; the exercise takes the 2-rank fit"
    return "the model is t = α + S / β, with S in bytes, β in bytes per second, and the answer in ms"


def check_halved_bytes(float32_ms: object, half_ms: object) -> Report:
    """A report on exercise 6: one all-reduce of the DDP benchmark's gradients, predicted in ms with the kept
    2-rank fit, in float32 and with a 16-bit compress hook."""
    (alpha, beta), other, report = kept_fit(2), kept_fit(4), Report()
    nbytes = sum(gradient_bytes())
    full, half = (alpha + nbytes / beta) * 1e3, (alpha + nbytes / 2 / beta) * 1e3
    for name, value, right, sent in (("float32", float32_ms, full, nbytes), ("16 bits", half_ms, half, nbytes / 2)):
        got = as_number(value)
        if isinstance(got, str):
            report.fail(f"{name}: give the time in ms as a number, not {got}")
        elif math.isclose(got, right, rel_tol=HALVED_REL_TOL):
            report.ok(f"{name}: {right:.2f} ms = α {alpha * 1e3:.3f} ms + {sent:,.0f} B / β")
        elif name == "16 bits" and math.isclose(got, full / 2, rel_tol=HALVED_REL_TOL):
            report.fail(f"{name}: you said {got:.3g} ms, half the float32 time: only the bytes halve; the hook still "
                        "sends one message, so α stays")
        elif name == "16 bits" and math.isclose(got, full, rel_tol=HALVED_REL_TOL):
            report.fail(f"{name}: you said {got:.3g} ms, the float32 time: a 16-bit hook sends 2 bytes per "
                        "gradient element instead of 4, so the bytes halve")
        else:
            report.fail(f"{name}: you said {got:.3g} ms, which is not right: "
                        f"{_halved_mistake(got, alpha, beta, sent, other)}")
    if report.passed:
        report.ok("the bytes' term S / β halved; α, paid once per message, stayed")
    return report


# Exercise 5: the gradients in one bucket and in the four buckets of bucket_cap_mb=1, from the kept 2-rank fit.
BUCKETS_AT_1_MIB = 4


def check_model_at_work(one_bucket_ms: object, four_buckets_ms: object) -> Report:
    """A report on exercise 5: all-reducing the DDP benchmark's gradients on 2 ranks, predicted in ms with the
    kept 2-rank fit, in one bucket and in four, overlap left out."""
    (alpha, beta), (alpha2, beta2), report = kept_fit(2), kept_fit(4), Report()
    nbytes = sum(gradient_bytes())
    one, four = (alpha + nbytes / beta) * 1e3, (BUCKETS_AT_1_MIB * alpha + nbytes / beta) * 1e3
    got = {}
    for name, value in (("one bucket", one_bucket_ms), ("four buckets", four_buckets_ms)):
        got[name] = as_number(value)
        if isinstance(got[name], str):
            report.fail(f"{name}: give the time in ms as a number, not {got[name]}")
    if report.lines:
        return report
    g1, g4 = got["one bucket"], got["four buckets"]

    def near(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=HALVED_REL_TOL)
    if near(g1, one):
        report.ok(f"one bucket: {one:.2f} ms = α {alpha * 1e3:.3f} ms + {nbytes:,} B / β")
    elif near(g1, one * 1e-3) or near(g1, one * 1e3):
        report.fail("one bucket: give milliseconds: the fit's α is in µs and β in GB/s")
    elif near(g1, (alpha2 + nbytes / beta2) * 1e3):
        report.fail("one bucket: that is the 4-rank fit; the exercise takes the 2-rank fit")
    elif near(g1, nbytes / beta * 1e3):
        report.fail("one bucket: add α: every all-reduce pays it once, whatever its size")
    else:
        report.fail(f"one bucket: you said {g1:.3g} ms, which is not right: the model is t = α + S / β, "
                    "with S in bytes, β in bytes per second, and the answer in ms")
    if near(g4, four):
        report.ok(f"four buckets: {four:.2f} ms = 4 α + the same bytes / β")
    elif near(g4, BUCKETS_AT_1_MIB * one):
        report.fail("four buckets: you counted the bytes four times: the four buckets carry the same gradients, "
                    "so only α is paid four times")
    elif near(g4, one):
        report.fail("four buckets: each bucket is one all-reduce, and each all-reduce pays α once")
    elif near(g4, (BUCKETS_AT_1_MIB * alpha2 + nbytes / beta2) * 1e3):
        report.fail("four buckets: that is the 4-rank fit; the exercise takes the 2-rank fit")
    else:
        report.fail(f"four buckets: you said {g4:.3g} ms, which is not right: four all-reduces of a quarter "
                    "of the bytes each, each paying α")
    if report.passed:
        report.ok(f"four buckets cost 3 α = {3 * alpha * 1e3:.2f} ms more; overlap must hide more than that to pay")
    return report


# Exercise 4: α and β by hand from the kept run's 4 B and 64 MiB rows on 2 ranks, then the time at 1 MiB.
TWO_ROWS_REL_TOL = 0.02


def two_rows() -> tuple[float, float, float]:
    """(α in µs, β in GB/s, the prediction at 1 MiB in µs) solved from the kept 2-rank rows of 4 B and 64 MiB."""
    from ddp_lib.bench import allreduce
    times = {r["bytes"]: r["time_us"] for r in allreduce.full_run()["rows"] if r["world_size"] == 2}
    small, large = 4, 64 * 2**20
    beta_bytes_per_us = (large - small) / (times[large] - times[small])
    alpha_us = times[small] - small / beta_bytes_per_us
    return alpha_us, beta_bytes_per_us * 1e-3, alpha_us + 2**20 / beta_bytes_per_us


def check_two_rows(alpha_us: object, beta_gbs: object, at_1_mib_us: object) -> Report:
    """A report on exercise 4: α (µs), β (GB/s) and the time at 1 MiB (µs), solved by hand from two rows."""
    alpha, beta, at_1_mib = two_rows()
    report = Report()
    got = {}
    for name, value in (("α", alpha_us), ("β", beta_gbs), ("1 MiB", at_1_mib_us)):
        got[name] = as_number(value)
        if isinstance(got[name], str):
            report.fail(f"{name}: give a number, not {got[name]}")
    if report.lines:
        return report

    def near(a: float, b: float) -> bool:
        return math.isclose(a, b, rel_tol=TWO_ROWS_REL_TOL)
    if near(got["α"], alpha):
        report.ok(f"α ≈ {alpha:.1f} µs: the 4 B row, whose bytes cost almost nothing")
    elif near(got["α"], alpha * 1e-6):
        report.fail("α: give microseconds, as the table prints the times")
    else:
        report.fail(f"α: you said {got['α']:.4g} µs: take the 4 B row's time; its 4 bytes cost almost nothing")
    if near(got["β"], beta):
        report.ok(f"β ≈ {beta:.3f} GB/s: (64 MiB - 4 B) over the two rows' difference in time")
    elif near(got["β"], beta * 1e9) or near(got["β"], beta * 2**30 / 1e9):
        report.fail("β: give GB/s, with GB = 10⁹ bytes")
    else:
        report.fail(f"β: you said {got['β']:.4g} GB/s: solve t = α + S / β with the 64 MiB row, "
                    "S = 67,108,864 B")
    if near(got["1 MiB"], at_1_mib):
        report.ok(f"1 MiB: α + 1,048,576 B / β ≈ {at_1_mib:.0f} µs")
    elif near(got["1 MiB"], at_1_mib - alpha):
        report.fail("1 MiB: add α: every all-reduce pays it once, whatever its size")
    elif near(got["1 MiB"], alpha + 1e6 / (beta * 1e3)):
        report.fail("1 MiB: 1 MiB is 1,048,576 bytes (2²⁰), not 10⁶")
    else:
        report.fail(f"1 MiB: you said {got['1 MiB']:.4g} µs: the model is t = α + S / β with your α and β")
    if report.passed:
        report.ok("the smallest row decides α, the largest β; compare the 1 MiB time with the table's row")
    return report
