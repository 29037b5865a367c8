"""The alpha-beta model of a collective's time: t(S) = alpha + S / beta, a fixed cost (latency)
plus the bytes over a bandwidth, fitted to a benchmark's medians."""

from __future__ import annotations


def _fit_two(x1: list[float], x2: list[float], seconds: list[float]) -> tuple[float, float]:
    """Least-squares fit of t = c1 * x1 + c2 * x2 on relative errors (each row weighs alike,
    whether it takes microseconds or a second). Returns (c1, c2)."""
    # Minimise sum(((c1 * x1 + c2 * x2) / t - 1) ** 2): linear in c1 and c2.
    a = [u / t for u, t in zip(x1, seconds)]
    b = [v / t for v, t in zip(x2, seconds)]
    saa, sab, sbb = sum(x * x for x in a), sum(x * y for x, y in zip(a, b)), sum(y * y for y in b)
    sa, sb = sum(a), sum(b)
    det = saa * sbb - sab * sab
    return (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det


def fit_alpha_beta(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """Fit t = alpha + S / beta to a benchmark's medians, on relative errors. Returns (alpha in
    seconds, beta in bytes/second)."""
    alpha, inv_beta = _fit_two([1.0] * len(sizes), sizes, seconds)
    return alpha, 1 / inv_beta


def fit_per_message(messages: list[int], bytes_sent: list[float], seconds: list[float]) -> tuple[float, float]:
    """Fit t = m * a + B / b, where m is the messages one rank sends one after another and B the
    bytes it sends (the ring's 2(N-1)/N x S). Returns (a, seconds per message; b, bytes/second)."""
    per_message, inv_b = _fit_two(messages, bytes_sent, seconds)
    return per_message, 1 / inv_b


def predict(alpha: float, beta: float, nbytes: int) -> float:
    """The model's seconds for one all-reduce of nbytes."""
    return alpha + nbytes / beta


def half_bandwidth_bytes(alpha: float, beta: float) -> float:
    """The size at which the fixed cost and the transfer take equally long (alpha x beta): below
    it latency rules the time, above it bandwidth; there the algbw is half of beta."""
    return alpha * beta
