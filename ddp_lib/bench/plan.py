"""Lesson 08's plan for your own model: the alpha-beta model's estimate of DDP's communication per
step, set against one backward, before anything runs. Every input is yours to measure.

    from ddp_lib.bench.plan import plan, format_plan
    print(format_plan(plan(params=1_000_000_000, n=8, alpha=20e-6, busbw=150e9, backward_ms=30)))
"""

from __future__ import annotations

import math

from ddp_lib.bench.report import bus_factor

MIB = 2**20


def plan(params: int, n: int, alpha: float, busbw: float, backward_ms: float,
         bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0, bytes_per_param: int = 4) -> dict:
    """The estimate for ``params`` parameters on ``n`` ranks, from an all-reduce's fixed cost
    ``alpha`` (seconds), its busbw (bytes per second: nccl-tests prints GB/s, so 150 GB/s is 150e9) and one backward's
    time in one process (ms). DDP's default buckets: a first one of ``first_bucket_mb`` MiB, then
    ``bucket_cap_mb`` MiB each. Returns the gradients' bytes B, the buckets k, beta (the algbw),
    the communication k*alpha + B/beta (ms), its ratio to backward, and, with no overlap and
    forward left out, the throughput of n ranks against one ("speedup")."""
    for name, value in (("params", params), ("n", n), ("alpha", alpha), ("busbw", busbw), ("backward_ms", backward_ms)):
        if not value > 0:
            raise ValueError(f"plan: {name} = {value!r}; it must be a positive number")
    if n < 2:
        raise ValueError(f"plan: n = {n!r}; it must be 2 or more ranks (one rank sends nothing)")
    nbytes = params * bytes_per_param
    first = first_bucket_mb * MIB
    buckets = 1 + max(0, math.ceil((nbytes - first) / (bucket_cap_mb * MIB)))
    beta = busbw / bus_factor(n)  # algbw: busbw x N / (2 (N - 1))
    comm_ms = (buckets * alpha + nbytes / beta) * 1e3
    return {"params": params, "n": n, "gradient_bytes": nbytes, "buckets": buckets, "beta": beta,
            "alpha_ms": buckets * alpha * 1e3, "bytes_ms": nbytes / beta * 1e3, "comm_ms": comm_ms,
            "backward_ms": backward_ms, "ratio": comm_ms / backward_ms,
            "speedup": n * backward_ms / (backward_ms + comm_ms)}


def format_plan(p: dict) -> str:
    """The plan in four lines."""
    return "\n".join([
        f"B = {p['gradient_bytes'] / 1e9:.2f} GB of gradients; k = {p['buckets']} buckets; "
        f"beta = busbw x N / (2(N-1)) = {p['beta'] / 1e9:.0f} GB/s",
        f"communication per step: k x alpha {p['alpha_ms']:.1f} ms + B / beta {p['bytes_ms']:.1f} ms "
        f"= {p['comm_ms']:.1f} ms",
        f"against a backward of {p['backward_ms']:g} ms: ratio {p['ratio']:.2f} "
        + ("(near 1 or above: bound by communication)" if p["ratio"] >= 0.8 else
           f"(without overlap, DDP adds about {p['ratio']:.0%} to the backward)"),
        f"with no overlap, counting backward alone: {p['n']} ranks step about {p['speedup']:.1f}x one rank's "
        f"throughput, not {p['n']}x",
    ])
