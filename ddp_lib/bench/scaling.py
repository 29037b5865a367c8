"""Samples per second of the training worker (ddp_lib.workers.train) on 1, 2 and 4 ranks.

Threads per rank, two policies: "one" (OMP_NUM_THREADS=1, torchrun's default: N ranks use N
cores, like N GPUs) and "share" (cores // ranks, ddp_lib's default: every run may use all the
cores). Start-up is taken out by timing, inside the ranks, a short and a long run of each
configuration in turn: rate = extra samples / extra seconds. Each round runs every configuration once, in
turn, so a round's rates share its load; ``verdict`` compares them round by round.

    python -m ddp_lib bench scaling [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 reads it beside a quick live run):

    python -m ddp_lib bench scaling --json > ddp_lib/bench/results/scaling.json

On a machine that other programs share, ``nice -n -19`` before the command (as root) gives the ranks
the cores; the run records its niceness beside the load average.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ddp_lib.bench.ranks import timed_train
from ddp_lib.bench.report import human_bytes, machine, run_main
from ddp_lib.bench.stats import median
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import threads_per_rank
from ddp_lib.workers.shared import make_moons

FULL_RUN = Path(__file__).with_name("results") / "scaling.json"
BATCH_SIZE = 16  # per rank, the worker's default: the global batch grows with the ranks
POLICIES = ("one", "share")
COLUMNS = [("world_size", "ranks", "d"), ("policy", "threads", "s"), ("threads_per_rank", "threads/rank", "d"),
           ("samples_per_s", "samples/s", ".0f"), ("speedup", "vs 1 rank", ".2f")]


def threads_for(policy: str, world_size: int) -> int:
    """OMP threads per rank under a policy: "one", or "share" (cores // ranks, at least 1)."""
    return 1 if policy == "one" else threads_per_rank(world_size)


def _run(world_size: int, epochs: int, threads: int) -> float:
    seconds = run_ranks(timed_train, world_size, args=(epochs, BATCH_SIZE), show_output=False,
                        env={"OMP_NUM_THREADS": str(threads)})
    return max(seconds)  # the slowest rank


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None,
            epochs: tuple[int, int] | None = None) -> dict:
    """{"rows": one per world size: threads per rank, samples per second, speed-up over 1 rank}."""
    repeats = repeats or (1 if quick else 15)
    world_sizes = world_sizes or ((1, 2) if quick else (1, 2, 4))
    policies = ("one",) if quick else POLICIES
    short, long = epochs or ((1, 8) if quick else (2, 20))
    samples = len(make_moons()) * (long - short)
    load_before = os.getloadavg()[0]
    configs = [(policy, ws) for policy in policies for ws in world_sizes]
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    for repeat in range(repeats + 1):  # round 0 is warm-up
        for _attempt in range(3):
            extras = {}
            for policy, ws in configs:
                threads = threads_for(policy, ws)
                extras[policy, ws] = _run(ws, long, threads) - _run(ws, short, threads)
            # A long run that took no longer than the short one was held up by something else: the round
            # measured nothing, so it is taken again (whole, so that its rates still share one moment's load).
            if min(extras.values()) > 0:
                break
        else:
            raise RuntimeError(f"round {repeat}: a {long}-epoch run took no longer than a {short}-epoch one "
                               "three times; the machine is too busy to time this")
        if repeat:
            for config, extra in extras.items():
                rates[config].append(samples / extra)
    rows = []
    for (policy, ws), r in rates.items():
        base = median(rates[policy, world_sizes[0]])
        rows.append({"world_size": ws, "policy": policy, "threads_per_rank": threads_for(policy, ws),
                     "samples_per_s": round(median(r), 1), "speedup": round(median(r) / base, 3),
                     "rounds_samples_per_s": [round(x, 1) for x in r]})
    # Other programs' load decides how the cores are shared, so the run says what it was.
    return {"rows": rows, "batch_size_per_rank": BATCH_SIZE, "epochs": [short, long], "repeats": repeats,
            **machine(), "load_average": round(max(load_before, os.getloadavg()[0]), 1),
            # Run with `nice -n -19` beside other programs, the ranks keep nearly all of the cores while the
            # load average still counts the others: the record says which it was.
            "niceness": os.nice(0)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def _notes(result: dict) -> str:
    return (f"batch {result['batch_size_per_rank']} per rank; rate from epochs {result['epochs'][1]} minus "
            f"{result['epochs'][0]} (start-up cancels); median of {result['repeats']} after a warm-up round; "
            "threads 'one': 1 per rank (N ranks on N cores); 'share': cores // ranks")


def main(argv: list[str]) -> int:
    return run_main(argv, "scaling", __doc__, measure, COLUMNS, _notes)


def verdict(result: dict, policy: str = "one", cut: bool = False) -> str:
    """Samples per second on 2 (and 4) ranks against 1 rank, one thread per rank, judged by a sign test over
    the rounds (each round runs every configuration in turn, so they share its load), both ways for each
    world size; ranks beyond the cores marked as oversubscribed. Each line prints the cut with ``cut``."""
    from ddp_lib.bench.wide import paired_wins, sign_test_wins

    cores = result["cpu_count"]
    rows = {r["world_size"]: r for r in result["rows"] if r["policy"] == policy}
    one = rows[min(rows)]["rounds_samples_per_s"]
    others = [ws for ws in rows if ws != min(rows)]
    needed = sign_test_wins(len(one), tests=2 * len(others))
    lines = []
    for ws in others:
        r = rows[ws]
        crowded = f" ({ws} ranks on {cores} cores: oversubscribed)" if ws > cores else ""
        fewer, more = paired_wins(r["rounds_samples_per_s"], one)
        said = "more" if more >= needed else "fewer" if fewer >= needed else "undecided"
        lines.append(f"{ws} ranks{crowded}: {r['speedup']:.2f}x the 1-rank rate (medians); more samples/s than "
                     f"1 rank in {more} of {len(one)} rounds, fewer in {fewer}; "
                     + (f"a verdict needs {needed}; " if cut else "") + f"so: {said}")
    lines.append(f"load average {result['load_average']} while it ran" + _priority(result))
    return "\n".join(lines)


def _priority(result: dict) -> str:
    """What the load average meant: said only for a run started at a raised priority (a negative niceness)."""
    niceness = result.get("niceness", 0)
    return (", the ranks given priority over other programs (as root): the other programs counted in the load "
            "got little of the cores"
            if niceness < 0 else "")


def gradient_bytes() -> int:
    """Bytes of the training worker's gradients in float32: 4 per parameter of its MoonsNet."""
    from ddp_lib.workers.train import MoonsNet
    return 4 * sum(p.numel() for p in MoonsNet().parameters())


def prediction(result: dict, alpha: float, policy: str = "one") -> tuple[float, float]:
    """(predicted, measured) 2-rank speed-up in samples per second over 1 rank: the estimate
    2 t / (t + alpha) from the 1-rank step t and the fitted ``alpha`` (seconds), and the kept run's."""
    rate = {r["world_size"]: r["samples_per_s"] for r in result["rows"] if r["policy"] == policy}
    local = BATCH_SIZE / rate[1]  # one step of one batch
    return 2 * local / (local + alpha), rate[2] / rate[1]


def extra_step(result: dict, allreduce_run: dict, alpha: float, policy: str = "one") -> str:
    """What the 2-rank step added to the 1-rank step, beside the kept all-reduce run's measured 2-rank times
    at the two kept sizes around the gradients' bytes, and beside the fitted ``alpha`` (seconds).

    The prediction is fixed before it meets the measurement: the estimate 2 t / (t + alpha) of the 2-rank
    speed-up with the fitted alpha, the model's cost of one small all-reduce (the gradients' bytes over
    beta add well under a microsecond). It is judged once, within 10%. The two measured all-reduces give
    a range beside it, with no verdict: they come from another run at another load, and the kept rows
    cannot tell which of them is this machine's usual small all-reduce."""
    rate = {r["world_size"]: r["samples_per_s"] for r in result["rows"] if r["policy"] == policy}
    local = BATCH_SIZE / rate[1]  # one step of one batch
    two = 2 * BATCH_SIZE / rate[2]  # one step of both ranks' batches
    extra, nbytes = two - local, gradient_bytes()
    times = {r["bytes"]: r["time_us"] * 1e-6 for r in allreduce_run["rows"] if r["world_size"] == 2}
    below, above = max(b for b in times if b <= nbytes), min(b for b in times if b >= nbytes)
    fast, slow = sorted((times[below], times[above]))

    def estimate(cost: float) -> float:
        return 2 * local / (local + cost)
    predicted, measured = prediction(result, alpha, policy)
    held = abs(measured / predicted - 1) < 0.1
    return "\n".join([
        f"gradients {nbytes} B; the kept all-reduce run, 2 ranks: {human_bytes(below)} took "
        f"{times[below] * 1e3:.2f} ms, {human_bytes(above)} {times[above] * 1e3:.2f} ms; "
        f"the fitted alpha is {alpha * 1e3:.2f} ms",
        f"2-rank step {two * 1e3:.2f} ms = local step {local * 1e3:.2f} ms + {extra * 1e3:.2f} ms: "
        f"{extra / slow:.1f} to {extra / fast:.1f} of those measured all-reduces, {extra / alpha:.1f} fitted alpha",
        f"prediction 2t / (t + alpha): {predicted:.2f}x; measured {measured:.2f}x; "
        f"within 10%: {held}",
        f"no verdict, another run's numbers: {estimate(slow):.2f}x to {estimate(fast):.2f}x "
        f"with alpha replaced by a measured small all-reduce"])
