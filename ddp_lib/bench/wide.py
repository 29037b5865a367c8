"""A wider model, where a step computes far longer than its all-reduce: the same global batch
trained by one process alone (one thread, then two threads), then by torch's DDP on 2 ranks with
one bucket and with DDP's default buckets, the four taken in turn in one run, one thread per rank.

    python -m ddp_lib bench wide [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 draws its verdicts from it):

    python -m ddp_lib bench wide --json > ddp_lib/bench/results/wide.json
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_lib.bench.ranks import _slowest, train_step
from ddp_lib.bench.report import machine, run_main
from ddp_lib.bench.stats import median, quartiles
from ddp_lib.launch import run_ranks
from ddp_lib.process_group import process_group, wrap_ddp
from ddp_lib.workers.shared import make_mlp

FULL_RUN = Path(__file__).with_name("results") / "wide.json"
WIDE_WIDTHS = (1024, 2048, 2048, 2048, 10)  # about 42 MB of float32 gradients
BATCH_PER_RANK = 256
ONE_BUCKET_CAP_MB = 1000.0  # more than all the gradients: one bucket, ready only at backward's end
SIGN_TEST_LEVEL = 0.05  # a way "wins" when chance alone would give that many shorter rounds less often
WAYS = ("one process", "one process, 2 threads", "DDP, one bucket", "DDP, default buckets")
ALONE_THREADS = {"one process": 1, "one process, 2 threads": 2}  # threads rank 0 uses when alone
COLUMNS = [("way", "way", "s"), ("step_ms", "step (ms)", ".1f"), ("middle_half", "middle half (ms)", "s"),
           ("samples_per_s", "samples/s", ".0f"), ("speedup", "vs one process", ".2f")]


def wide_steps(rank: int, world_size: int, repeats: int, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """{"step": seconds per step of each way, one list per way, "cpu": the CPU seconds of every rank's
    process in that step, added up}, the ways taken in turn (who goes first
    rotates from round to round) after one warm-up round (DDP rebuilds its buckets after its first
    step). "one process": rank 0 alone steps a plain copy on the whole global batch while the other
    ranks wait at a barrier; "one process, 2 threads" does the same with two threads, so that one
    process may use both cores too. The DDP ways: every rank steps its share; the slowest rank's time
    counts."""
    with process_group(rank, world_size) as device:
        alone = make_mlp(seed, WIDE_WIDTHS).to(device)
        models = {"DDP, one bucket": wrap_ddp(make_mlp(seed, WIDE_WIDTHS).to(device), device,
                                              bucket_cap_mb=ONE_BUCKET_CAP_MB),
                  "DDP, default buckets": wrap_ddp(make_mlp(seed, WIDE_WIDTHS).to(device), device)}
        optimizers = {way: torch.optim.SGD(m.parameters(), lr=0.01) for way, m in models.items()}
        alone_optimizer = torch.optim.SGD(alone.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(BATCH_PER_RANK * world_size, WIDE_WIDTHS[0], generator=g)
        y = torch.randn(BATCH_PER_RANK * world_size, WIDE_WIDTHS[-1], generator=g)
        share = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
        times: dict[str, list[float]] = {way: [] for way in WAYS}
        cpu: dict[str, list[float]] = {way: [] for way in WAYS}
        for repeat in range(repeats + 1):  # the first round warms up
            # Rotate who goes first, so no way always follows the same neighbour.
            order = WAYS[repeat % len(WAYS):] + WAYS[:repeat % len(WAYS)]
            for way in order:
                dist.barrier()
                start, cpu_start = time.perf_counter(), time.process_time()
                if way in ALONE_THREADS:
                    if rank == 0:
                        torch.set_num_threads(ALONE_THREADS[way])
                        train_step(alone, alone_optimizer, x, y)
                        torch.set_num_threads(1)
                else:
                    train_step(models[way], optimizers[way], x[share], y[share])
                seconds = time.perf_counter() - start
                if repeat:
                    times[way].append(seconds)
                    cpu[way].append(time.process_time() - cpu_start)
        cpu_sums = {}
        for way, seconds in cpu.items():  # every rank's CPU time added up, per round
            t = torch.tensor(seconds, dtype=torch.float64)
            dist.all_reduce(t)
            cpu_sums[way] = t.tolist()
        return {"step": {way: _slowest(seconds) for way, seconds in times.items()}, "cpu": cpu_sums}


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    """{"rows": per way, the median step time over the repeats, its quartiles, samples per second of
    the global batch, the speed-up over one process, each round's time ("rounds_ms": the ways
    took turns within a round, so rounds pair them), the median CPU time of a step, every rank's
    process added up ("cpu_ms", all its threads, from ``time.process_time()``), and the median of
    CPU time over wall time per round ("cores_busy": how many cores the way kept busy on average)},
    2 ranks of one thread each."""
    repeats = repeats or (5 if quick else 15)
    world_size = 2
    result = run_ranks(wide_steps, world_size, args=(repeats,), show_output=False, env={"OMP_NUM_THREADS": "1"})[0]
    seconds = result["step"]
    samples = BATCH_PER_RANK * world_size
    alone_s = median(seconds["one process"])
    rows = []
    for way in WAYS:
        ms = [s * 1e3 for s in seconds[way]]
        low, high = quartiles(ms)
        rows.append({"way": way, "step_ms": round(median(ms), 2), "quartiles_ms": [round(low, 2), round(high, 2)],
                     "middle_half": f"{low:.0f}-{high:.0f}", "samples_per_s": round(samples / (median(ms) / 1e3), 1),
                     "speedup": round(alone_s / median(seconds[way]), 3), "rounds_ms": [round(t, 2) for t in ms],
                     "cpu_ms": round(median(result["cpu"][way]) * 1e3, 2),
                     "cores_busy": round(median([c / s for c, s in zip(result["cpu"][way], seconds[way])]), 2)})
    gradient_bytes = 4 * sum(p.numel() for p in make_mlp(0, WIDE_WIDTHS).parameters())
    return {"rows": rows, "world_size": world_size, "widths": list(WIDE_WIDTHS), "batch_per_rank": BATCH_PER_RANK,
            "gradient_bytes": gradient_bytes, "repeats": repeats, **machine(),
            "load_average": round(os.getloadavg()[0], 1)}


def sign_test_p(wins: int, rounds: int) -> float:
    """The chance of at least ``wins`` shorter rounds out of ``rounds`` if each round were a coin toss."""
    return sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds


def sign_test_wins(rounds: int, tests: int = 1, level: float = SIGN_TEST_LEVEL) -> int:
    """The fewest rounds out of ``rounds`` in which one way must be shorter for a sign test to call
    it shorter, in a family of ``tests`` such tests: if each round were a coin toss, at least that many
    wins would come with probability under ``level / tests`` (Bonferroni's rule), so that all the
    family's tests together give a false "shorter" with probability under ``level``."""
    if tests < 1:
        raise ValueError(f"tests={tests!r}: a family holds at least 1 test")
    for wins in range(rounds + 1):
        if sign_test_p(wins, rounds) < level / tests:
            return wins
    return rounds + 1


def paired_wins(first: list[float], second: list[float]) -> tuple[int, int]:
    """Over paired rounds, how many rounds ``first`` was lower in and how many ``second`` was (ties count
    for neither): the two counts a sign test judges."""
    return sum(a < b for a, b in zip(first, second)), sum(b < a for a, b in zip(first, second))


def full_run() -> dict:
    """The run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def main(argv: list[str]) -> int:
    return run_main(argv, "wide", __doc__, measure, COLUMNS)


def verdict(result: dict, tests: int = 6, cut: bool = False) -> str:
    """Sign tests over the paired rounds: DDP on 2 ranks (default buckets) against one process on 1 and
    on 2 threads, and default buckets against one bucket; ``tests`` sets the cut (Bonferroni's rule),
    which each line prints with ``cut``."""
    rounds = {r["way"]: r["rounds_ms"] for r in result["rows"]}
    ddp_ms = rounds["DDP, default buckets"]
    needed = sign_test_wins(len(ddp_ms), tests=tests)
    lines = []
    for way, label, name in (("one process", "one process, 1 thread", "one process"),
                             ("one process, 2 threads", "one process, 2 threads", "one process"),
                             ("DDP, one bucket", "one bucket", "default buckets")):
        mine, theirs = paired_wins(ddp_ms, rounds[way])
        winner = "DDP" if mine >= needed else label if theirs >= needed else "undecided"
        if name == "default buckets":
            winner = "default buckets" if mine >= needed else winner
        lines.append(f"DDP{'' if name == 'one process' else ', default buckets'} against {label}: shorter in "
                     f"{mine} of {len(ddp_ms)} paired rounds, {label} in {theirs}; "
                     + (f"a verdict needs {needed}; " if cut else "") + f"shorter: {winner}")
    lines.append(f"load average {result['load_average']} while it ran")
    return "\n".join(lines)
