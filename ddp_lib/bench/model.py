"""The alpha-beta model of a collective's time: t(S) = alpha + S / beta, a fixed cost (latency)
plus the bytes over a bandwidth, fitted to a benchmark's medians."""

from __future__ import annotations


def fit_alpha_beta(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares fit of t = alpha + S / beta on relative errors (each size weighs alike,
    whether it takes microseconds or a second). Returns (alpha in seconds, beta in bytes/second)."""
    # Minimise sum(((alpha + S * inv_beta) / t - 1) ** 2): linear in alpha and inv_beta.
    a = [1 / t for t in seconds]
    b = [s / t for s, t in zip(sizes, seconds)]
    saa, sab, sbb = sum(x * x for x in a), sum(x * y for x, y in zip(a, b)), sum(y * y for y in b)
    sa, sb = sum(a), sum(b)
    det = saa * sbb - sab * sab
    alpha = (sa * sbb - sb * sab) / det
    inv_beta = (saa * sb - sab * sa) / det
    return alpha, 1 / inv_beta


def predict(alpha: float, beta: float, nbytes: int) -> float:
    """The model's seconds for one all-reduce of nbytes."""
    return alpha + nbytes / beta


def half_bandwidth_bytes(alpha: float, beta: float) -> float:
    """The size at which the fixed cost and the transfer take equally long (alpha x beta): below
    it latency rules the time, above it bandwidth; there the algbw is half of beta."""
    return alpha * beta
