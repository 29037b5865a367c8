"""torch DDP steps profiled on rank 0 (2 ranks), small buckets and one bucket in paired rounds, in a
random order each round: when each step's phases and backward's operators ran on the training
thread, and when gloo's all-reduces ran on the process group's worker threads. This shows whether
communication overlaps backward, measured rather than asserted, and splits each step into forward,
backward's computation, the communication backward waited for, and the optimizer. During each
backward, every rank also reads its threads' CPU time and their wait for a core from the kernel
(``/proc/self/task/<id>/schedstat``): the training thread's, and gloo's threads' together.

    python -m ddp_lib bench overlap [--json]

The kept run's JSON is in the repository (lesson 08 reads it):

    python -m ddp_lib bench overlap --json > ddp_lib/bench/results/overlap.json
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from ddp_lib.bench.ranks import DDP_BATCH, DDP_WIDTHS, train_step
from ddp_lib.bench.report import machine, run_main
from ddp_lib.bench.stats import median, quartiles
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.shared import make_mlp

FULL_RUN = Path(__file__).with_name("results") / "overlap.json"
BUCKET_CAP_MB = 1.0  # small enough for several buckets, so early ones can go out during backward
ONE_BUCKET_CAP_MB = 25.0  # all gradients in one bucket: it is ready only when backward is done
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "  # how the profiler names a backward operator
ALLREDUCE_NAME = "gloo:all_reduce"  # gloo's own record of one all-reduce, on gloo's worker thread
PHASES = ("zero_grad", "forward", "backward", "optimizer")  # the profiled step's labelled parts
GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")  # gloo's worker threads and its socket loop, by name
PROFILED_STEPS = 21  # per cap, odd: the kept timeline is the step of median length
QUICK_STEPS = 5
COLUMNS = [("lane", "lane", "s"), ("name", "event", "s"), ("start_ms", "start (ms)", ".3f"),
           ("end_ms", "end (ms)", ".3f")]


def labelled_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                   read_threads=lambda: None) -> None:
    """The benchmark's training step, each part marked for the profiler. With gloo, DDP's backward() returns
    only once every bucket's all-reduce is done, so its label spans the wait too. ``read_threads`` is
    called as backward's label opens and just before it closes."""
    with record_function("zero_grad"):
        optimizer.zero_grad()
    with record_function("forward"):
        loss = nn.functional.mse_loss(model(x), y)
    with record_function("backward"):
        read_threads()
        loss.backward()
        read_threads()
    with record_function("optimizer"):
        optimizer.step()


def _rows(events, origin: float) -> list[dict]:
    """The phases, backward operators and all-reduces among the profiler's events, in ms from origin."""
    rows = []
    for e in events:
        if e.name in PHASES:
            lane, name = "phase", e.name
        elif e.name.startswith(BACKWARD_PREFIX):
            lane, name = "backward", e.name.removeprefix(BACKWARD_PREFIX)
        elif e.name == ALLREDUCE_NAME:
            lane, name = "all-reduce", e.name
        else:
            continue
        rows.append({"lane": lane, "name": name, "start_ms": round((e.time_range.start - origin) / 1e3, 3),
                     "end_ms": round((e.time_range.end - origin) / 1e3, 3)})
    return sorted(rows, key=lambda r: r["start_ms"])


def _thread_ids() -> dict[str, list[int]]:
    """This process's training thread (the caller) and gloo's threads, by their kernel thread ids."""
    gloo = [int(tid) for tid in os.listdir("/proc/self/task")
            if Path(f"/proc/self/task/{tid}/comm").read_text().strip() in GLOO_THREADS]
    return {"training": [threading.get_native_id()], "gloo": gloo}


def _cpu_and_wait_ns(tids: list[int]) -> tuple[int, int]:
    """The threads' CPU time and their time waiting for a core, summed, in ns since each started: the
    first two fields of the kernel's schedstat."""
    cpu = wait = 0
    for tid in tids:
        run_ns, queued_ns = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[:2]
        cpu, wait = cpu + int(run_ns), wait + int(queued_ns)
    return cpu, wait


def profile_ddp_steps(rank: int, world_size: int, caps_mb: tuple[float, ...] = (BUCKET_CAP_MB, ONE_BUCKET_CAP_MB),
                      steps: int = PROFILED_STEPS, seed: int = 0) -> dict:
    """Profile ``steps`` SGD steps of torch's DDP for each bucket cap, in paired rounds (one model per
    cap, same weights and batch), each step after a barrier and three warm-up steps per model. Each
    round takes the caps in a random order, the same on every rank, so neither always goes first.
    Returns {"rows": per cap, this rank's phases, backward operators and all-reduces of every profiled
    step, as {"lane", "name", "start_ms", "end_ms"}, times from that step's start; "threads": per cap
    and step, the CPU time and the wait for a core of the training thread and of gloo's threads during
    backward, ms, and when backward began on the machine's monotonic clock, which every process shares
    ("backward start ns"); "first": the cap taken first in each round}."""
    with process_group(rank, world_size) as device:
        models = {cap: wrap_ddp(make_mlp(seed, DDP_WIDTHS).to(device), device, bucket_cap_mb=cap) for cap in caps_mb}
        optimizers = {cap: torch.optim.SGD(m.parameters(), lr=0.01) for cap, m in models.items()}
        g = torch.Generator().manual_seed(seed + rank)
        x = torch.randn(DDP_BATCH, DDP_WIDTHS[0], generator=g)
        y = torch.randn(DDP_BATCH, DDP_WIDTHS[-1], generator=g)
        for _ in range(3):  # DDP rebuilds its buckets after the first step; the rest warm up
            for cap in caps_mb:
                train_step(models[cap], optimizers[cap], x, y)
        order = torch.Generator().manual_seed(seed)  # the same seed on every rank: the same order
        tids = _thread_ids()
        result: dict = {"rows": {cap: [] for cap in caps_mb}, "threads": {cap: [] for cap in caps_mb}, "first": []}
        for _ in range(steps):
            caps = [caps_mb[i] for i in torch.randperm(len(caps_mb), generator=order).tolist()]
            result["first"].append(caps[0])
            for cap in caps:
                torch.distributed.barrier()
                reads: list[dict] = []
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    labelled_step(models[cap], optimizers[cap], x, y, lambda out=reads: out.append(
                        {"clock": time.monotonic_ns(), **{k: _cpu_and_wait_ns(v) for k, v in tids.items()}}))
                events = prof.events()
                origin = min(e.time_range.start for e in events if e.name in PHASES)
                result["rows"][cap].append(_rows(events, origin))
                before, after = reads
                times = {f"{k} {what}": (after[k][i] - before[k][i]) / 1e6
                         for k in tids for i, what in enumerate(("cpu", "wait"))}
                result["threads"][cap].append({**times, "backward start ns": before["clock"]})
        return result


def median_step(steps: list[list[dict]]) -> list[dict]:
    """The rows of the step of median length (``steps`` is odd, so it is one of them)."""
    return sorted(steps, key=lambda rows: step_ms({"rows": rows}))[len(steps) // 2]


def step_summary(rows: list[dict]) -> dict[str, float]:
    """One profiled step in numbers, ms: breakdown()'s four parts, the whole step, how long
    all-reduces ran (communication_ms) and how long they ran while backward computed."""
    result = {"rows": rows}
    summary = {part: round(ms, 3) for part, ms in breakdown(result).items()}
    summary.update({"step": round(step_ms(result), 3), "communication": round(communication_ms(result), 3),
                    "hidden": round(overlapped_ms(result), 3)})
    return summary


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": rank 0's phases, backward operators and all-reduces of the median profiled step
    with BUCKET_CAP_MB, "one_bucket": the same for ONE_BUCKET_CAP_MB, where nothing can overlap,
    "steps": each cap's step_summary() of every profiled step, with both ranks' thread times during
    backward added up ("training cpu", "training wait", "gloo cpu", "gloo wait", ms) and how much later
    rank 1 began backward than rank 0 ("rank skew", ms), "small_first": the rounds that took
    BUCKET_CAP_MB first}. The caps are profiled in paired rounds, in a random order."""
    count = repeats or (QUICK_STEPS if quick else PROFILED_STEPS)
    count += 1 - count % 2  # odd, so the median is one step
    env = {"OMP_NUM_THREADS": "1"}
    caps = (BUCKET_CAP_MB, ONE_BUCKET_CAP_MB)
    ranks = run_ranks(profile_ddp_steps, 2, args=(caps, count), show_output=False, env=env)
    profiled = ranks[0]["rows"]
    steps = {}
    for cap in caps:
        steps[f"{cap:g}"] = []
        for i, rows in enumerate(profiled[cap]):
            summary = step_summary(rows)
            per_rank = [r["threads"][cap][i] for r in ranks]
            for key in per_rank[0]:
                if key != "backward start ns":
                    summary[key] = round(sum(times[key] for times in per_rank), 3)
            summary["rank skew"] = round((per_rank[1]["backward start ns"] - per_rank[0]["backward start ns"]) / 1e6, 3)
            steps[f"{cap:g}"].append(summary)
    return {"rows": median_step(profiled[BUCKET_CAP_MB]), "bucket_cap_mb": BUCKET_CAP_MB,
            "one_bucket": median_step(profiled[ONE_BUCKET_CAP_MB]), "one_bucket_cap_mb": ONE_BUCKET_CAP_MB,
            "steps": steps, "small_first": sum(first == BUCKET_CAP_MB for first in ranks[0]["first"]),
            **machine(), "load_average": round(os.getloadavg()[0], 1)}


def full_run() -> dict:
    """The run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def backward_end_ms(result: dict) -> float:
    """When the last backward operator finished."""
    return max(r["end_ms"] for r in result["rows"] if r["lane"] == "backward")


def computation_end_ms(result: dict) -> float:
    """When backward's computation ended: its last operator's end, or the last all-reduce's start if
    that came first. DDP starts its last bucket only once every gradient is in; after that the
    training thread only waits, and the profiler's record of backward's last operator sometimes
    spans that wait."""
    last_start = max(r["start_ms"] for r in result["rows"] if r["lane"] == "all-reduce")
    return min(backward_end_ms(result), last_start)


def step_ms(result: dict) -> float:
    """The profiled step's length: from the first phase's start to the last phase's end."""
    phases = [r for r in result["rows"] if r["lane"] == "phase"]
    return max(r["end_ms"] for r in phases) - min(r["start_ms"] for r in phases)


def communication_ms(result: dict) -> float:
    """How long at least one all-reduce ran (the union of their intervals)."""
    return _union_ms([(r["start_ms"], r["end_ms"]) for r in result["rows"] if r["lane"] == "all-reduce"])


def _union_ms(spans: list[tuple[float, float]]) -> float:
    total, reached = 0.0, float("-inf")
    for start, stop in sorted(spans):
        start = max(start, reached)
        if stop > start:
            total += stop - start
        reached = max(reached, stop)
    return total


def breakdown(result: dict) -> dict[str, float]:
    """The step in four parts, ms: forward (with zero_grad), backward's computation (from backward's
    start to computation_end_ms), the communication backward waited for (from there to backward's
    return) and the optimizer. They add up to the step, but for the short gaps between
    the phases."""
    phase = {r["name"]: r for r in result["rows"] if r["lane"] == "phase"}
    computed_until = computation_end_ms(result)
    return {
        "forward": phase["forward"]["end_ms"] - phase["zero_grad"]["start_ms"],
        "backward computation": computed_until - phase["backward"]["start_ms"],
        "communication not hidden": phase["backward"]["end_ms"] - computed_until,
        "optimizer": phase["optimizer"]["end_ms"] - phase["optimizer"]["start_ms"],
    }


def overlapped_ms(result: dict) -> float:
    """How long all-reduces ran while backward still computed (the union of their intervals up to
    computation_end_ms)."""
    end = computation_end_ms(result)
    return _union_ms([(r["start_ms"], min(r["end_ms"], end)) for r in result["rows"] if r["lane"] == "all-reduce"])


def spread(result: dict, cap_mb: float, part: str) -> tuple[float, float, float]:
    """Median, first and third quartiles of one part of step_summary() over a cap's profiled steps."""
    values = [step[part] for step in result["steps"][f"{cap_mb:g}"]]
    return (median(values), *quartiles(values))


def spread_text(values: tuple[float, float, float]) -> str:
    """A spread() as text: ``median ms [first quartile-third quartile]``."""
    return f"{values[0]:5.1f} ms [{values[1]:.1f}-{values[2]:.1f}]"


# One question of the profile, which cap gave the shorter whole step, asked both ways (is small shorter? is one
# bucket shorter?): two tests, which share the 5% error budget (Bonferroni's rule).
STEP_TESTS = 2
# Three comparisons of the threads' times during backward (the training threads' CPU time and wait for a core,
# gloo's threads' CPU time), each asked both ways: six tests, with a 5% budget of their own.
THREAD_TESTS = 6


def paired_verdict(result: dict, part: str, tests: int = STEP_TESTS) -> str:
    """The sign test on one part of step_summary() over the profile's paired rounds, small buckets against
    one bucket: "lower" or "higher" (small buckets' part against one bucket's) or "undecided", with the
    wins each way, p and the cut for ``tests`` tests."""
    from ddp_lib.bench.wide import paired_wins, sign_test_p, sign_test_wins

    small = [step[part] for step in result["steps"][f"{result['bucket_cap_mb']:g}"]]
    one = [step[part] for step in result["steps"][f"{result['one_bucket_cap_mb']:g}"]]
    cut = sign_test_wins(len(small), tests=tests)
    small_wins, one_wins = paired_wins(small, one)
    wins = max(small_wins, one_wins)
    verdict = "undecided" if wins < cut else ("lower" if small_wins > one_wins else "higher")
    return (f"{verdict}: small buckets shorter in {small_wins} of {len(small)} rounds, one bucket in {one_wins}; "
            f"p = {sign_test_p(wins, len(small)):.2g}, a verdict needs {cut}")


def main(argv: list[str]) -> int:
    return run_main(argv, "overlap", __doc__, measure, COLUMNS)


def overlap_verdict(result: dict) -> str:
    """In the median step of small buckets: how many all-reduces started before backward's computation
    ended and how long they ran under it; over all profiled steps, how many had some overlap."""
    end = computation_end_ms(result)
    starts = [r["start_ms"] for r in result["rows"] if r["lane"] == "all-reduce"]
    steps = result["steps"][f"{result['bucket_cap_mb']:g}"]
    return "\n".join([
        f"{len(starts)} all-reduces; backward's computation ended at {end:.1f} ms",
        f"all-reduces that started before it ended: {sum(s < end for s in starts)}, "
        f"running {overlapped_ms(result):.1f} ms under it",
        f"steps with some overlap, of all {len(steps)} profiled: {sum(s['hidden'] > 0 for s in steps)} "
        f"(load average {result['load_average']})",
    ])


def parts_ms(result: dict) -> dict[str, dict[str, float]]:
    """{"bucket_cap_mb=C": {part: median ms}} for both caps, the parts of breakdown() (plot_step_breakdown's input)."""
    names = list(breakdown(result))
    return {f"bucket_cap_mb={cap:g}": {part: spread(result, cap, part)[0] for part in names}
            for cap in (result["bucket_cap_mb"], result["one_bucket_cap_mb"])}


def _round_wins(result: dict, part: str) -> tuple[int, int, int]:
    """Over the profile's paired rounds: (rounds, small buckets' wins, one bucket's wins) on one part."""
    rounds = list(zip(result["steps"][f"{result['bucket_cap_mb']:g}"],
                      result["steps"][f"{result['one_bucket_cap_mb']:g}"]))
    return (len(rounds), sum(s[part] < o[part] for s, o in rounds), sum(o[part] < s[part] for s, o in rounds))


def _all_reduce_counts(result: dict) -> tuple[int, int]:
    """All-reduces in the kept timeline of each cap: (small buckets, one bucket)."""
    small, one = (sum(r["lane"] == "all-reduce" for r in rows) for rows in (result["rows"], result["one_bucket"]))
    return small, one


def step_sentence(result: dict) -> str:
    """One plain sentence on the step's cost: both caps' median whole steps, the paired rounds each was shorter
    in, the wins a verdict needs (STEP_TESTS tests: the question asked both ways), and what the sign test decides
    (paired_verdict, which also gives p)."""
    small_count, _ = _all_reduce_counts(result)
    caps = (result["bucket_cap_mb"], result["one_bucket_cap_mb"])
    small_ms, one_ms = (spread(result, cap, "step")[0] for cap in caps)
    rounds, small_wins, one_wins = _round_wins(result, "step")
    from ddp_lib.bench.wide import sign_test_wins

    verdict = paired_verdict(result, "step").split(":")[0]
    cut = sign_test_wins(rounds, tests=STEP_TESTS)
    decided = {"lower": "small buckets made the step shorter", "higher": "small buckets made the step longer",
               "undecided": "too few rounds to say which is shorter"}[verdict]
    wins, who = (one_wins, "one bucket") if one_wins >= small_wins else (small_wins, "small buckets")
    return (f"{small_count} small buckets: step {small_ms:.1f} ms; one bucket: step {one_ms:.1f} ms (medians). "
            f"{who.capitalize()} gave the shorter step in {wins} of {rounds} paired rounds; a verdict needs {cut} "
            f"({STEP_TESTS} tests: the question asked both ways): {decided}.")


def step_verdict(result: dict) -> str:
    """A plain sentence on the whole step (step_sentence), the median parts of the step for both caps, and the
    all-reduces' summed time."""
    parts, caps = parts_ms(result), (result["bucket_cap_mb"], result["one_bucket_cap_mb"])
    names = list(next(iter(parts.values())))
    lines = [step_sentence(result), f"{'median (ms)':>18}" + "".join(f"{part:>26}" for part in names)
             + f"{'whole step':>12}"]
    for (label, values), cap in zip(parts.items(), caps):
        lines.append(f"{label:>18}" + "".join(f"{ms:26.1f}" for ms in values.values())
                     + f"{spread(result, cap, 'step')[0]:12.1f}")
    steps = result["steps"][f"{caps[0]:g}"]
    summed = [spread(result, cap, "communication")[0] for cap in caps]
    gap = max(s["step"] - sum(s[part] for part in names) for cap in caps for s in result["steps"][f"{cap:g}"])
    lines += [f"{len(steps)} paired rounds, small buckets first in {result['small_first']}; rank 0; in every step "
              f"the four parts add up to the step but for at most {gap:.1f} ms",
              f"all-reduces ran {summed[0]:.1f} ms in all with small buckets, {summed[1]:.1f} ms with one "
              f"(medians; two can run at once)"]
    return "\n".join(lines)


def _steps_by_cap(result: dict) -> tuple[tuple[int, int], list[float]]:
    """The kept profile's all-reduce counts and median whole steps (ms), small cap first, then one bucket."""
    steps = [spread(result, cap, "step")[0] for cap in (result["bucket_cap_mb"], result["one_bucket_cap_mb"])]
    return _all_reduce_counts(result), steps


def extra_bucket_ms(result: dict) -> float:
    """What one extra bucket cost in the kept profile: the two caps' median whole steps apart, in ms,
    per extra all-reduce."""
    counts, steps = _steps_by_cap(result)
    return (steps[0] - steps[1]) / (counts[0] - counts[1])


def bucket_cost_verdict(result: dict, alpha: float) -> str:
    """What an extra bucket cost in the kept profile, in one plain sentence: the two caps' median whole steps,
    and their difference per extra all-reduce in ms and as a multiple of the fitted alpha (itself in doubt:
    lesson 08 weighs it). The paired rounds' verdict is step_sentence()'s."""
    counts, steps = _steps_by_cap(result)
    per_bucket_ms = extra_bucket_ms(result)
    change, size_ms = ("cost" if per_bucket_ms >= 0 else "saved"), abs(per_bucket_ms)
    return (f"under the profiler: {counts[0]} buckets took {steps[0]:.1f} ms a step, "
            f"{counts[1]} bucket {steps[1]:.1f} ms (medians). Each extra bucket {change} about {size_ms:.1f} ms, "
            f"{size_ms * 1e-3 / alpha:.1f} times the fitted alpha of {alpha * 1e3:.2f} ms.")
