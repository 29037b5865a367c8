"""All-reduce time, algbw and busbw against message size for 2 and 4 ranks, as nccl-tests
prints them, next to this machine's limits: memory copy and loopback socket bandwidth.

    python -m ddp_lib bench allreduce [--quick] [--repeats N] [--json]

The full run's JSON is kept in the repository (lesson 08 reads it beside a quick live run):

    python -m ddp_lib bench allreduce --json > ddp_lib/bench/results/allreduce.json
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import torch

from ddp_lib.bench.model import fit_alpha_beta
from ddp_lib.bench.ranks import allreduce_sweep, loops_per_timing
from ddp_lib.bench.report import algbw_gbs, bus_factor, busbw_gbs, human_bytes, machine, run_main
from ddp_lib.bench.stats import median
from ddp_lib.launch import run_ranks

SIZES = [4**k for k in range(1, 14)]  # 4 B to 64 MiB
QUICK_SIZES = [4**k for k in (1, 4, 7, 10, 12)]  # 4 B to 16 MiB
REPEATS, QUICK_REPEATS = 21, 7
# The full run kept in the repository: regenerate it with the command in this module's docstring.
FULL_RUN = Path(__file__).with_name("results") / "allreduce.json"
COLUMNS = [("world_size", "ranks", "d"), ("size", "size", "s"), ("count", "count", "d"), ("type", "type", "s"),
           ("time_us", "time (us)", ".1f"), ("spread", "middle half (us)", "s"),
           ("algbw_gbs", "algbw (GB/s)", ".3f"), ("busbw_gbs", "busbw (GB/s)", ".3f")]


def copy_bandwidth_gbs(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """GB/s of one thread's ``dst.copy_(src)`` (bytes copied per second), the ceiling of any
    transfer between processes on this machine."""
    src, dst = torch.ones(nbytes // 4), torch.empty(nbytes // 4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for repeat in range(repeats + 1):
            start = time.perf_counter()
            dst.copy_(src)
            if repeat:
                times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return nbytes / median(times) / 1e9


def _socket_sender(port: int, nbytes: int, rounds: int) -> None:
    """The other process of loopback_bandwidth_gbs: on each go byte, send nbytes."""
    payload = bytes(1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        for _ in range(rounds):
            conn.recv(1)
            left = nbytes
            while left:
                left -= conn.send(memoryview(payload)[:min(left, len(payload))])


def loopback_bandwidth_gbs(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    """GB/s of a raw TCP stream from a second process over 127.0.0.1: what gloo rides on here."""
    start_method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        sender = multiprocessing.get_context(start_method).Process(
            target=_socket_sender, args=(server.getsockname()[1], nbytes, repeats + 1), daemon=True)
        sender.start()
        try:
            conn, _ = server.accept()
            with conn:
                buffer = memoryview(bytearray(1 << 20))
                times = []
                for repeat in range(repeats + 1):  # round 0 is warm-up
                    start = time.perf_counter()
                    conn.sendall(b"g")
                    left = nbytes
                    while left:
                        got = conn.recv_into(buffer, min(left, len(buffer)))
                        if not got:
                            raise ConnectionError("the sender closed the loopback connection early")
                        left -= got
                    if repeat:
                        times.append(time.perf_counter() - start)
        finally:
            sender.join(timeout=10)
            if sender.is_alive():
                sender.kill()
    return nbytes / median(times) / 1e9


def table_rows(world_size: int, sweep: list[dict]) -> list[dict]:
    """nccl-tests' columns for one world size from allreduce_sweep's medians."""
    rows = []
    for r in sweep:
        seconds, nbytes = r["all_reduce_s"], r["bytes"]
        q1, q3 = (round(q * 1e6, 1) for q in r["all_reduce_quartiles_s"])
        rows.append({"world_size": world_size, "bytes": nbytes, "size": human_bytes(nbytes), "count": nbytes // 4,
                     "type": "float", "time_us": round(seconds * 1e6, 1), "q1_us": q1, "q3_us": q3,
                     "spread": f"{q1:.0f}-{q3:.0f}",
                     "algbw_gbs": round(algbw_gbs(nbytes, seconds), 4),
                     "busbw_gbs": round(busbw_gbs(nbytes, seconds, world_size), 4)})
    return rows


def fitted_models(rows: list[dict]) -> list[dict]:
    """Per world size, the alpha-beta model fitted to the medians: alpha (latency, us), beta
    (bandwidth in algbw's terms, GB/s), the same fitted beta read as a busbw (beta x 2(N-1)/N: a fit,
    not a ceiling, so a measured busbw can lie above it), and the worst relative error of the fit."""
    models = []
    for world_size in sorted({r["world_size"] for r in rows}):
        mine = [r for r in rows if r["world_size"] == world_size]
        sizes, seconds = [r["bytes"] for r in mine], [r["time_us"] * 1e-6 for r in mine]
        alpha, beta = fit_alpha_beta(sizes, seconds)
        worst = max(abs(alpha + s / beta - t) / t for s, t in zip(sizes, seconds))
        models.append({"world_size": world_size, "alpha_us": round(alpha * 1e6, 1), "beta_gbs": round(beta / 1e9, 3),
                       "beta_busbw_gbs": round(beta / 1e9 * bus_factor(world_size), 3),
                       "worst_error": round(worst, 3)})
    return models


def measure(quick: bool = False, repeats: int | None = None, world_sizes: tuple[int, ...] | None = None,
            sizes: list[int] | None = None) -> dict:
    """{"rows": one per (world size, size), "models": the alpha-beta fit per world size,
    "copy_gbs", "loopback_gbs": this machine's limits, and how it was run}."""
    repeats = repeats or (QUICK_REPEATS if quick else REPEATS)
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    world_sizes = world_sizes or ((2,) if quick else (2, 4))
    rows, load_before = [], os.getloadavg()[0]
    for world_size in world_sizes:
        sweep = run_ranks(allreduce_sweep, world_size, args=(sizes, repeats), show_output=False)[0]
        rows += table_rows(world_size, sweep)
    limit_bytes = max(sizes)
    return {"rows": rows, "models": fitted_models(rows),
            # Four significant digits: a small limit_bytes can give well under 0.001 GB/s.
            "copy_gbs": float(f"{copy_bandwidth_gbs(limit_bytes, repeats):.4g}"),
            "loopback_gbs": float(f"{loopback_bandwidth_gbs(limit_bytes, repeats):.4g}"),
            "repeats": repeats, **machine(),
            "load_average": round(max(load_before, os.getloadavg()[0]), 1)}


def full_run() -> dict:
    """The full run kept in the repository (``FULL_RUN``), as ``measure()`` returned it."""
    return json.loads(FULL_RUN.read_text())


def _notes(result: dict) -> str:
    lines = [f"median of {result['repeats']} repeats (slowest rank each) after a warm-up; busbw = algbw x 2(N-1)/N",
             f"limits on this machine ({result['cpu_count']} cores): memory copy (one thread) "
             f"{result['copy_gbs']:.2f} GB/s, loopback socket {result['loopback_gbs']:.2f} GB/s"]
    for m in result["models"]:
        lines.append(f"{m['world_size']} ranks: t = {m['alpha_us']:.0f} us + size / {m['beta_gbs']:.3f} GB/s "
                     f"(fitted beta as busbw {m['beta_busbw_gbs']:.3f} GB/s; worst fit error {m['worst_error']:.0%})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return run_main(argv, "allreduce", __doc__, measure, COLUMNS, _notes)


# A fall in the medians smaller than this share is within the fit's own tolerance (fit_verdict's "within 25%").
FALL_TOLERANCE = 0.25


def fit_start(result: dict, world_size: int = 2, tolerance: float = FALL_TOLERANCE) -> int:
    """The smallest size from which ``world_size``'s medians no longer fall: no larger size took less than
    (1 - tolerance) times any size from there up, with middle halves apart (the larger size's third quartile
    below the smaller's first), where the rows have them. Below it, some smaller message took longer than a
    larger one, which the model alpha + S / beta cannot draw (in an earlier kept run, 16 B to 4 KiB)."""
    rows = sorted((r for r in result["rows"] if r["world_size"] == world_size), key=lambda r: r["bytes"])

    def fell(small: dict, large: dict) -> bool:
        apart = large.get("q3_us", large["time_us"]) < small.get("q1_us", small["time_us"]) or tolerance == 0
        return large["time_us"] < (1 - tolerance) * small["time_us"] and apart

    start = rows[-1]["bytes"]
    for i in range(len(rows) - 1, -1, -1):
        if any(fell(rows[i], later) for later in rows[i + 1:]):
            break
        start = rows[i]["bytes"]
    return start


def held_fit(result: dict, world_size: int = 2, from_bytes: int | None = None) -> tuple[float, float]:
    """(alpha in seconds, beta in bytes per second) fitted to ``world_size``'s medians from ``from_bytes`` up
    (by default from ``fit_start``)."""
    from_bytes = fit_start(result, world_size) if from_bytes is None else from_bytes
    mine = [r for r in result["rows"] if r["world_size"] == world_size and r["bytes"] >= from_bytes]
    return fit_alpha_beta([r["bytes"] for r in mine], [r["time_us"] * 1e-6 for r in mine])


def fit_verdict(result: dict, world_size: int = 2, from_bytes: int | None = None, detail: bool = False) -> str:
    """The fit where the model holds, its errors there, and alpha's share of a 4 KiB message (three lines).
    With ``detail``, instead: the sizes below the fit, if any, and whether 16 B to 4 KiB took longer than
    16 to 64 KiB, where gloo's ring sends the same messages, looped as often (the hump of an earlier run)."""
    from ddp_lib.bench.gloo_ring import ring_sends
    from_bytes = fit_start(result, world_size) if from_bytes is None else from_bytes
    alpha, beta = held_fit(result, world_size, from_bytes)
    times = {r["bytes"]: r["time_us"] for r in result["rows"] if r["world_size"] == world_size}
    fitted = [b for b in times if b >= from_bytes]
    errors = {b: (alpha + b / beta) / (times[b] * 1e-6) - 1 for b in times}
    within = sum(abs(errors[b]) < 0.25 for b in fitted)
    worst = max(fitted, key=lambda b: abs(errors[b]))
    smallest = min(times)
    where = ("every size: the medians never clearly fall" if from_bytes == smallest
             else "where the medians stop falling")
    fit = [
        f"{world_size} ranks, fitted from {human_bytes(from_bytes)} ({where}) to "
        f"{human_bytes(max(times))}: "
        f"alpha = {alpha * 1e6:.0f} us, beta = {beta / 1e9:.3f} GB/s, S1/2 = {alpha * beta / 1024:.0f} KiB",
        f"  within 25% on {within} of {len(fitted)} sizes; furthest at {human_bytes(worst)}: the model is "
        f"{abs(errors[worst]):.0%} {'above' if errors[worst] > 0 else 'below'} the measured time",
        f"in the model, one 4 KiB message: alpha is {alpha / (alpha + 4096 / beta):.0%} of it; "
        f"two 2 KiB messages cost {2 * (alpha + 2048 / beta) * 1e6:.0f} us, "
        f"one 4 KiB {(alpha + 4096 / beta) * 1e6:.0f} us",
    ]
    hump = [b for b in times if 16 <= b <= 4 * 1024]
    after = [b for b in times if 16 * 1024 <= b <= 64 * 1024]
    same = {(len(ring_sends(b, world_size)), loops_per_timing(b)) for b in hump + after}
    messages, loops = min(same)
    slow, fast = min(times[b] for b in hump), max(times[b] for b in after)
    left_out = [b for b in times if b < from_bytes]
    below = [
        (f"below {human_bytes(from_bytes)}: {human_bytes(min(left_out))} to {human_bytes(max(left_out))} took "
         f"{min(times[b] for b in left_out):.0f}-{max(times[b] for b in left_out):.0f} us, "
         f"the model says {alpha * 1e6:.0f} us" if left_out
         else f"no size below the fit: it starts at the smallest, {human_bytes(smallest)}"),
        f"  16 B to 64 KiB: gloo's ring sends {messages} messages ({messages // world_size} per rank), "
        f"each timing loops {loops} calls, "
        f"the same at every size: {len(same) == 1}",
        f"  16 B to 4 KiB took {slow:.0f}-{max(times[b] for b in hump):.0f} us, 16 to 64 KiB "
        f"{min(times[b] for b in after):.0f}-{fast:.0f} us; the smaller sizes took longer: {slow > fast}"
        + ("; the same messages, so not gloo's algorithm" if slow > fast and len(same) == 1 else ""),
    ]
    return "\n".join(below if detail else fit)
